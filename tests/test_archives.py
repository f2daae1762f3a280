"""A tar archive cut short in transfer (xz, gz) is a sentence that names it, not a raw EOFError from the stream."""
import io, tarfile
import pytest
from npm_nb.core import extract_tar

@pytest.mark.parametrize('mode,suffix', [('w:xz', '.tar.xz'), ('w:gz', '.tar.gz')])
def test_extract_tar_of_a_cut_short_archive_says_copy_it_again(tmp_path, mode, suffix):
    a = tmp_path/f'x{suffix}'
    with tarfile.open(a, mode) as t:
        data = bytes(range(256)) * 4096
        info = tarfile.TarInfo('big.bin'); info.size = len(data); t.addfile(info, io.BytesIO(data))
    a.write_bytes(a.read_bytes()[:len(a.read_bytes()) // 2])
    with pytest.raises(ValueError, match='is cut short or damaged .*copy it again') as e: extract_tar(a, tmp_path/'out')
    assert str(a) in str(e.value)
