# nbdev 2 style setup: every field comes from settings.ini.
from configparser import ConfigParser
import setuptools, shlex

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, f"missing expected setting: {o}"
setup_cfg = {o: cfg[o] for o in cfg_keys}

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable',
            '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
extras = {'dev': dev_requirements, 'cpu': shlex.split(cfg.get('cpu_requirements', '')),
          'gpu': shlex.split(cfg.get('gpu_requirements', ''))}  # FAISS: [cpu] or [gpu], never both
lic = licenses[cfg['license'].lower()]
min_python = cfg['min_python']
setuptools.setup(
    name=cfg['lib_name'].replace('_', '-'),
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'License :: ' + lic[1],
                 'Natural Language :: ' + cfg['language'].title()] +
                ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['npm_nb', 'npm_nb.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require=extras,
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': cfg.get('console_scripts', '').split(),  # npm-nb=npm_nb.run.cli:main
                  'nbdev': [f'{cfg["lib_path"]}={cfg["lib_path"]}._modidx:d']},
    **setup_cfg)
