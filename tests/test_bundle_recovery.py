"""The offline bundle after things went wrong (npm_nb.run.bundle): an install without manifest.json that stopped between
unpacking and reassembly, or is run again once finished; a checkpoint archive cut short in transfer; a model archive whose
weights are not weights; `collect --finish-here` on a run that recorded no step, or from a profile folder whose name the
shell would read as two commands. Tiny inputs, a few seconds in all."""
import io, json, os, re, shutil, tarfile
from pathlib import Path
import pytest


def _tar(path: Path, members: dict, mode='w') -> Path:
    "A tar of `{name: bytes}`."
    with tarfile.open(path, mode) as t:
        for name, body in members.items():
            ti = tarfile.TarInfo(name); ti.size = len(body); t.addfile(ti, io.BytesIO(body))
    return path


@pytest.fixture
def manifestless(tmp_path):
    "A bundle of two files in three parts, copied where it is installed without its manifest.json (the documented fallback)."
    from npm_nb.run.bundle import write_parts
    src = tmp_path/'src'; src.mkdir(); (src/'a.bin').write_bytes(os.urandom(120_000)); (src/'b.bin').write_bytes(os.urandom(60_000))
    man = write_parts([{'name': f'files/{n}', 'kind': 'file', 'path': src/n} for n in ('a.bin', 'b.bin')], tmp_path/'bundle', part_mb=0.1)
    assert len(man['parts']) >= 2
    there = tmp_path/'there'; shutil.copytree(tmp_path/'bundle', there); (there/'manifest.json').unlink()
    return src, there


def test_install_without_manifest_resumes_after_a_crash_before_reassembly(tmp_path, manifestless):
    # RELIABILITY-4 N28: killed after the last part was unpacked, before reassembly: every later install said
    # `no bundle parts in …` and did nothing; only `install --force`, which no message named, recovered
    from npm_nb.run.bundle import install
    src, there = manifestless
    stage = tmp_path/'stage'; (stage/'items').mkdir(parents=True)
    (stage/'items'/'files').write_text('in the way')   # reassembly fails: the job dies there, every part already unpacked
    with pytest.raises(OSError): install(there, stage=stage, python='-')
    st = json.loads((stage/'state.json').read_text())
    assert sorted(st['parts']) == sorted(p.name for p in there.glob('*.tar')) and not st['items']
    (stage/'items'/'files').unlink()
    r = install(there, stage=stage, python='-')      # resumes from what was unpacked: no --force
    assert r['complete'], r
    for n in ('a.bin', 'b.bin'): assert (stage/'items'/'files'/n).read_bytes() == (src/n).read_bytes()


def test_install_without_manifest_resumes_a_stage_that_kept_no_table_of_contents(tmp_path, manifestless, capsys):
    # RELIABILITY-4 N28: a stage left by an earlier version (no bundle.json kept): the parts at hand still have it
    from npm_nb.run.bundle import install
    src, there = manifestless
    stage = tmp_path/'stage'; (stage/'items').mkdir(parents=True); (stage/'items'/'files').write_text('in the way')
    with pytest.raises(OSError): install(there, stage=stage, python='-')
    (stage/'items'/'files').unlink(); (stage/'bundle.json').unlink()
    assert install(there, stage=stage, python='-')['complete']
    # parts gone and no table of contents: a sentence that names what recovers, --force included
    stage2 = tmp_path/'stage2'; (stage2/'items').mkdir(parents=True); (stage2/'items'/'files').write_text('in the way')
    with pytest.raises(OSError): install(there, stage=stage2, python='-')
    (stage2/'items'/'files').unlink(); (stage2/'bundle.json').unlink()
    empty = tmp_path/'gone'; empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r'holds the unpacked .*no table of contents.*copy manifest.json \(or one part\).*install --force'):
        install(empty, stage=stage2, python='-')


def test_install_without_manifest_run_again_says_it_is_complete(tmp_path, manifestless, capsys):
    # RELIABILITY-4 N27: re-running a finished manifest-less install said `no bundle parts in …` (the parts are there)
    from npm_nb.run.bundle import install, main
    src, there = manifestless
    stage = tmp_path/'stage'
    assert install(there, stage=stage, python='-')['complete']
    capsys.readouterr()
    r = install(there, stage=stage, python='-')
    assert r['complete'] and r['missing_parts'] == []
    out = capsys.readouterr().out
    assert 'complete already: every item of the bundle is installed' in out and 'no bundle parts' not in out, out
    assert main(['install', '--bundle', str(there), '--stage', str(stage)]) == 0
    # a state written by an earlier version (no `complete`): the kept table of contents finishes the run, no false message
    st = json.loads((stage/'state.json').read_text()); st.pop('complete'); (stage/'state.json').write_text(json.dumps(st))
    assert install(there, stage=stage, python='-')['complete']


def test_restore_checkpoint_of_an_archive_cut_short_is_a_sentence(tmp_path, capsys):
    # RELIABILITY-4 E36: a checkpoint .tar.xz cut short in transfer: raw `EOFError: Compressed file ended before the
    # end-of-stream marker was reached` (11 frames) from `bundle restore-checkpoint`
    from npm_nb.run.bundle import main, restore_checkpoint, restore_model
    whole = _tar(tmp_path/'whole.tar.xz', {'train_config.json': b'{}', 'model.fp16.safetensors': os.urandom(200_000)}, 'w:xz')
    cut = tmp_path/'ckpt-p-npm.tar.xz'; cut.write_bytes(whole.read_bytes()[:len(whole.read_bytes()) // 2])
    with pytest.raises(ValueError, match=re.escape(f'{cut} is cut short') + '.*copy it again'): restore_checkpoint(cut)
    with pytest.raises(ValueError, match='is cut short'): restore_model(cut, root=tmp_path/'models')
    assert main(['restore-checkpoint', str(cut)]) == 2
    err = capsys.readouterr().err
    assert 'is cut short' in err and 'Traceback' not in err and 'EOFError' not in err, err


def test_restore_model_with_garbage_weights_names_the_archive(tmp_path):
    # RELIABILITY-4 N33: `SafetensorError: Error while deserializing header: header too large`, the archive not named
    from npm_nb.run.bundle import restore_model
    arch = _tar(tmp_path/'model-m.fp16.tar', {'bundle_model.json': json.dumps({'name': 'm', 'weights': 'model.safetensors'}).encode(),
                                              'model.fp16.safetensors': b'\xff' * 64})
    with pytest.raises(ValueError, match=re.escape(f'{arch}: its model.fp16.safetensors is not readable weights')):
        restore_model(arch, root=tmp_path/'models')
    assert not (tmp_path/'models'/'m').exists()


def _came_back(tmp_path, profile, steps) -> Path:
    d = tmp_path/'results'/'runs'/profile/'20260102-000000'; d.mkdir(parents=True)
    (d/'status.json').write_text(json.dumps({'profile': profile, 'run_id': d.name, 'finished': None, 'steps': steps}))
    return d


def test_finish_here_on_a_run_that_recorded_no_step(tmp_path, capsys):
    # RELIABILITY-4 N31: `steps: {}` said 'finished there, nothing to finish here' although the batch treats a run
    # without steps as unfinished
    from npm_nb.run.bundle import _finish_here
    from npm_nb.run.batch import LOCAL_MARK, _unfinished
    run = _came_back(tmp_path, 'p', {})
    assert _unfinished(run)
    assert _finish_here(run) is None and not (run/LOCAL_MARK).exists()
    out = capsys.readouterr().out
    assert 'records no step' in out and 'give it more GPU jobs' in out and 'finished there' not in out, out


def test_finish_here_quotes_the_profile_in_its_advice(tmp_path, capsys, monkeypatch):
    # RELIABILITY-4 N32: a profile folder `h100;touch PWN3` was echoed into the printed shell advice as it is
    monkeypatch.setenv('NPM_NB_DATA', str(tmp_path/'data'))
    from npm_nb.run.bundle import _finish_here
    run = _came_back(tmp_path, 'h100;touch PWN3', {'01_train': {'state': 'interrupted'}})
    assert _finish_here(run) is None
    out = capsys.readouterr().out
    assert "run 'h100;touch PWN3' ..." in out and 'run h100;touch' not in out, out
    run = _came_back(tmp_path, 'p;q', {'01_train': {'state': 'done'}, '05_open_set': {'state': 'pending'}})
    assert _finish_here(run) is None   # no checkpoint here yet
    assert "ckpt-'p;q'-*.tar.xz" in capsys.readouterr().out
