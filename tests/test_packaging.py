"""The package as a user gets it: a wheel with the configs inside, installed non-editable into a
throwaway environment, run from outside the repository, with the user's own configs on top."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_for_the_wheel():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO / "src").parts) for p in (REPO / "src").rglob("__init__.py")}
    assert found | {"mathneuro.conf"} == listed



def user_conf(root: Path, tiny_dir: Path) -> Path:
    """A user's own config folder: a model and an experiment the package does not ship."""
    (root / "model").mkdir(parents=True)
    (root / "experiment").mkdir()
    (root / "model" / "my_tiny.yaml").write_text(textwrap.dedent(f"""\
        name: my_tiny
        name_or_path: {tiny_dir}
        dtype: float32
        device: cpu
        """))
    (root / "experiment" / "my_quick.yaml").write_text(textwrap.dedent("""\
        # @package _global_
        defaults:
          - override /eval: none
          - override /logger: none
        num_samples: 5
        max_length: 48
        batch_size: 4
        top_k: 0.1
        progress: false
        """))
    return root


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MATHNEURO_CONF")}
    return {**env, "HF_HUB_OFFLINE": "1", "HYDRA_FULL_ERROR": "1", **extra}


def source_copy(root: Path) -> Path:
    """The files a build reads, copied with ``src/mathneuro/conf`` kept a link to ``conf/`` (so the
    repository gets no build/ or egg-info)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in ("src", "conf"):
        shutil.copytree(REPO / name, root / name, ignore=ignore, symlinks=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    assert (root / "src" / "mathneuro" / "conf").is_symlink()
    return root


@pytest.mark.integration
def test_the_sdist_holds_the_configs_and_builds_a_wheel_that_ships_them(tmp_path):
    src = source_copy(tmp_path / "src-copy")
    out = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; import sys; "
                            "print(b.build_sdist(sys.argv[1]))", str(out)],
                           capture_output=True, text=True, timeout=300, env=clean_env(), cwd=src)
    assert built.returncode == 0, built.stderr[-3000:]
    sdist = out / built.stdout.split()[-1]
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1]: m for m in tf.getmembers() if "/" in m.name}
    yamls = {f"src/mathneuro/conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    assert yamls <= set(members), sorted(yamls - set(members))
    assert all(members[name].isfile() for name in yamls)  # the files themselves, not the link
    wheels = tmp_path / "wheels"
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(wheels), str(sdist)], capture_output=True, text=True, timeout=300,
                           env=clean_env(), cwd=tmp_path)
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    (whl,) = wheels.glob("mathneuro-*.whl")
    with zipfile.ZipFile(whl) as zf:
        shipped = set(zf.namelist())
    assert {name.removeprefix("src/") for name in yamls} <= shipped


@pytest.mark.e2e
@pytest.mark.integration
def test_wheel_installs_anywhere_and_runs_with_a_users_config_dir(tiny_dir, tmp_path):
    src = source_copy(tmp_path / "src-copy")
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=300,
                           env=clean_env(), cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    # no build warnings (setuptools once warned per data folder: "absent from the `packages` configuration")
    warnings = re.findall(r".*\w+Warning\b.*", built.stdout + built.stderr)  # BuildBackendWarning, ...
    assert not warnings, warnings[:5]
    (wheel,) = wheels.glob("mathneuro-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = set(zf.namelist())
    yamls = {f"mathneuro/conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    data = {p.relative_to(REPO / "src").as_posix() for p in (REPO / "src" / "mathneuro").rglob("*")
            if p.is_file() and p.suffix in (".yaml", ".jsonl", ".txt") and "__pycache__" not in p.parts}
    assert yamls and yamls <= shipped and data <= shipped, sorted((yamls | data) - shipped)

    # a throwaway venv that reuses the installed dependencies through a .pth line (not their
    # .pth hooks, so the shared editable mathneuro stays invisible); the wheel goes in with --target
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True, timeout=300, env=clean_env(), cwd=tmp_path)
    work = tmp_path / "elsewhere"  # outside the repository
    work.mkdir()
    where = subprocess.run([str(py), "-c", "import mathneuro, mathneuro.cli.run as c; print(mathneuro.__file__); "
                            "print(c.config_dir())"], check=True, capture_output=True, text=True,
                           env=clean_env(), cwd=work).stdout.split()
    assert where[0].startswith(str(site)) and where[1] == str(site / "mathneuro" / "conf")
    assert (site / "mathneuro" / "conf" / "experiment" / "pruning_sweep.yaml").exists()

    conf = user_conf(tmp_path / "myconf", tiny_dir)
    cache = tmp_path / "cache"
    run_dir = work / "run"
    res = subprocess.run([str(site / "bin" / "mathneuro"), "--config-dir", str(conf), "model=my_tiny",
                          "experiment=my_quick", f"cache_dir={cache}", f"hydra.run.dir={run_dir}"],
                         capture_output=True, text=True, timeout=300, env=clean_env(), cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "complete" and results["point"]["model"] == "my_tiny"
    assert results["point"]["top_k"] == 0.1 and results["config"]["eval"]["name"] == "none"
    assert results["selection"]["num_selected"] > 0
    assert {s["source"] for s in results["statistics"]} == {"computed"}


def test_a_users_config_folder_adds_groups_through_the_searchpath(tiny_dir, tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from mathneuro.cli.run import config_dir, job_dirname
    from mathneuro.pipeline.config import register_configs, validate

    conf = user_conf(tmp_path / "myconf", tiny_dir)
    register_configs()
    if not OmegaConf.has_resolver("mathneuro_dirname"):
        OmegaConf.register_new_resolver("mathneuro_dirname", job_dirname)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra.searchpath=[file://{conf}]", "model=my_tiny",
                                                       "experiment=my_quick", "task=gsm8k"])
    assert cfg.model.name == "my_tiny" and cfg.model.name_or_path == str(tiny_dir)
    assert cfg.eval.name == "none" and cfg.num_samples == 5 and cfg.task.name == "gsm8k"  # shipped groups too
    validate(OmegaConf.to_object(cfg))
