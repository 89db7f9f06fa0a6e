"""Third-party plugins, proven with packages installed by pip and the real `zoo` command.

Every package here is installed with `pip install --target` into a temporary
folder and the `zoo` console script runs as a subprocess with that folder on
PYTHONPATH, so a plugin is found exactly as an installed one is: by
importlib.metadata, through the `zoo` entry-point group. Installs happen once
per session; commands that import torch (load, sample) are kept few.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import ROOT

EXAMPLE = ROOT / "examples" / "zoo-alibi"
ZOO = Path(sys.executable).parent / "zoo"
ALIBI_VARIANT = "alibi-swiglu-4b"
PROMPT = "ROMEO:"


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def run_zoo(*args: str, path: tuple[Path, ...] = (), cwd: Path | None = None, timeout: float = 300, **env: str) -> Run:
    """`zoo ARGS` in a fresh process that sees only the packages on ``path``; ``timeout``
    (seconds) only stops a hung process, so it allows for a machine shared with others."""
    environment = {
        key: value for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "ZOO_REGISTRY", "ZOO_BUILTIN_REGISTRY", "ZOO_PLUGINS", "ZOO_DISABLE_PLUGIN_AUTOLOAD"}
    }
    environment["OMP_NUM_THREADS"] = "1"  # tiny models; more threads only contend on a shared machine
    if path:
        environment["PYTHONPATH"] = os.pathsep.join(map(str, path))
    environment.update(env)
    done = subprocess.run([str(ZOO), *args], capture_output=True, text=True, env=environment, timeout=timeout, cwd=cwd)
    return Run(done.returncode, done.stdout, done.stderr)


def pip_install(target: Path, *sources: Path, again: bool = False) -> None:
    """A real install of local packages, offline, with the zoo's own setuptools
    (``again``: over an earlier install into ``target``, as `pip install .` replaces one)."""
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
        "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), *(["--upgrade"] if again else []),
        *map(str, sources),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode:
        pytest.fail(f"pip install failed:\n{done.stdout}\n{done.stderr}")


def run_example_tests(installed: Path, example: str) -> subprocess.CompletedProcess:
    """An example package's own tests (examples/EXAMPLE/tests, copied beside ``installed``),
    run by pytest against the package as installed into ``installed``."""
    tests = installed.parent / example / "tests"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)], cwd=tests.parent,
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(installed), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


def write_package(root: Path, entry_point: str, module_source: str, data: dict[str, str | Path] | None = None) -> Path:
    """A one-module package zoo-ENTRY-POINT whose entry point in group `zoo` is ENTRY-POINT."""
    package = "zoo_" + entry_point.replace("-", "_")
    folder = root / f"zoo-{entry_point}"
    (folder / package).mkdir(parents=True)
    (folder / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "zoo-{entry_point}"
        version = "0.0.1"

        [project.entry-points.zoo]
        {entry_point} = "{package}"

        [tool.setuptools]
        packages = ["{package}"]

        [tool.setuptools.package-data]
        {package} = ["*.toml", "*.tiktoken"]
        """))
    (folder / package / "__init__.py").write_text(textwrap.dedent(module_source))
    for name, content in (data or {}).items():
        if isinstance(content, Path):
            shutil.copyfile(content, folder / package / name)
        else:
            (folder / package / name).write_text(textwrap.dedent(content))
    return folder


@pytest.fixture(scope="session")
def alibi(tmp_path_factory) -> Path:
    """examples/zoo-alibi, pip-installed into a folder of its own."""
    root = tmp_path_factory.mktemp("alibi")
    source = root / "zoo-alibi"
    # pip builds in the source folder; a copy keeps build/ and *.egg-info out of the repository.
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache", "*.lock"))
    pip_install(root / "site", source)
    # From here on the only importable zoo_alibi is the installed one; its tests stay.
    shutil.rmtree(source / "zoo_alibi")
    return root / "site"


GHOST_REGISTRY = """\
    [ghost-2b]
    description = "Declared by a plugin that forgot to ship the weights."
    architecture = "transformer"
    context_length = 8
    lineage = "test"
    license = "MIT"

    [ghost-2b.config]
    d_model = 16
    n_layer = 2
    n_head = 2

    [ghost-2b.tokenizer]
    kind = "bpe"
    vocab_size = 1024
    file = "bpe-1024.tiktoken"

    [ghost-2b.checkpoint]
    path = "ghost-2b.safetensors"
    """


@pytest.fixture(scope="session")
def broken(tmp_path_factory) -> Path:
    """Six misbehaving plugins, installed together by one pip run."""
    root = tmp_path_factory.mktemp("broken")
    sources = [
        write_package(root, "broken-import", """\
            import zoo_missing_dependency  # not installed anywhere: importing the plugin fails
            """),
        write_package(root, "raising-hook", """\
            from zoo_core import hookimpl

            @hookimpl
            def register_positions(register):
                register("half-done", "zoo_raising_hook:Nothing")

            @hookimpl
            def register_blocks(register):
                raise RuntimeError("the block table is not ready")
            """),
        write_package(root, "clash", """\
            from zoo_core import hookimpl

            @hookimpl
            def register_positions(register):
                register("alibi", "zoo_clash:AnotherALiBi")  # zoo-alibi's name
            """),
        write_package(root, "ghost", """\
            from pathlib import Path

            from zoo_core import hookimpl

            @hookimpl
            def register_variants(register):
                register(Path(__file__).parent / "registry.toml")
            """, data={"registry.toml": GHOST_REGISTRY, "bpe-1024.tiktoken": ROOT / "checkpoints" / "bpe-1024.tiktoken"}),
        write_package(root, "typo-hook", """\
            from zoo_core import hookimpl

            @hookimpl
            def register_position(register):  # the hook is register_positions
                register("never-seen", "zoo_typo_hook:Nothing")
            """),
        write_package(root, "blocks", """\
            from zoo_core import hookimpl

            @hookimpl
            def register_blocks(register):
                register("other-block", "zoo_blocks:Block")
            """),
    ]
    pip_install(root / "site", *sources)
    return root / "site"


@pytest.fixture
def bare() -> dict:
    """What the zoo shows with no third-party plugin on the path, taken afresh for
    each test: registry.toml may change while a session runs (training publishes)."""
    return {"plugins": run_zoo("plugins", "--json").json(), "list": run_zoo("list", "--json").json()}


def _plugins(report: dict) -> dict[str, dict]:
    return {p["name"]: p for p in report["plugins"]}


def _third_party(report: dict) -> list[str]:
    return sorted(p["name"] for p in report["plugins"] if not p["builtin"])


def _check_alibi_samples(*path: Path, **env: str) -> None:
    run = run_zoo("sample", ALIBI_VARIANT, "--prompt", PROMPT, "--max-new-tokens", "30", "--seed", "1", path=path, **env)
    assert run.code == 0, run.err
    assert run.out.startswith(PROMPT) and len(run.out.strip()) > len(PROMPT) + 10


# -- the example plugin, installed ----------------------------------------------------


def test_zoo_plugins_shows_the_installed_plugin_its_version_and_what_it_registered(alibi):
    report = run_zoo("plugins", "--json", path=(alibi,)).json()
    assert _plugins(report)["alibi"] == {
        "name": "alibi",
        "distribution": "zoo-alibi",
        "version": "0.1.0",
        "builtin": False,
        "registered": {
            "positions": ["alibi"],
            "blocks": ["swiglu-pre-norm"],
            "variant files": [str(alibi / "zoo_alibi" / "variants" / "registry.toml")],
        },
        "errors": [],
    }
    assert report["conflicts"] == []
    text = run_zoo("plugins", path=(alibi,)).out
    assert "alibi 0.1.0 (zoo-alibi)\n  positions: alibi\n  blocks: swiglu-pre-norm\n" in text


def test_its_variant_is_listed_loaded_verified_and_sampled(alibi):
    card = tomllib.loads((alibi / "zoo_alibi" / "variants" / "registry.toml").read_text())[ALIBI_VARIANT]
    rows = {row["name"]: row for row in run_zoo("list", "--json", path=(alibi,)).json()}
    # "norm" is a label the core derives from the block's name; not this plugin's to assert.
    assert rows[ALIBI_VARIANT] | {"norm": None} == {
        "name": ALIBI_VARIANT, "architecture": "transformer", "layers": 4, "positions": "alibi", "norm": None,
        "context": 32, "parameters": card["parameters"], "validation_loss": card["metrics"]["validation_loss"],
        "tokenizer": "bpe", "weights": True, "source": "plugin", "unbuildable": None, "validation_data": "tinyshakespeare",
    }
    assert "alibi-swiglu-4b" in run_zoo("list", "alibi*", path=(alibi,)).out

    loaded = run_zoo("load", ALIBI_VARIANT, "--json", path=(alibi,))
    assert loaded.code == 0, loaded.err
    summary = loaded.json()
    assert summary["verified"] == ["sha256", "names", "shapes", "parameters", "tokenizer sha256"]
    assert summary["sha256"] == card["checkpoint"]["sha256"]
    assert Path(summary["checkpoint"]) == alibi / "zoo_alibi" / "variants" / "alibi-swiglu-4b.safetensors"
    assert summary["parameters"] == card["parameters"]
    _check_alibi_samples(alibi)


def test_without_it_the_variant_is_gone_and_nothing_else_changed(alibi, bare):
    with_plugin = run_zoo("list", "--json", path=(alibi,)).json()
    assert [row for row in with_plugin if row["name"] != ALIBI_VARIANT] == bare["list"]
    assert ALIBI_VARIANT not in {row["name"] for row in bare["list"]}
    report = run_zoo("plugins", "--json", path=(alibi,)).json()
    assert [p for p in report["plugins"] if p["name"] != "alibi"] == bare["plugins"]["plugins"]
    missing = run_zoo("show", ALIBI_VARIANT)
    assert missing.code == 1
    assert missing.err.startswith(f"zoo: error: unknown variant '{ALIBI_VARIANT}'") and missing.err.count("\n") == 1


def test_the_example_passes_its_own_tests_against_the_installed_package(alibi):
    done = run_example_tests(alibi, "zoo-alibi")
    assert done.returncode == 0 and "9 passed" in done.stdout, done.stdout + done.stderr


def test_the_shipped_variant_beats_the_bigram_baseline(alibi):
    # A 4-block model no better than the bigram would have learned nothing from context.
    bigram = tomllib.loads((ROOT / "registry.toml").read_text())["bigram"].get("metrics", {}).get("validation_loss")
    if bigram is None:
        pytest.skip("the bigram in registry.toml has no measured validation loss yet")
    card = tomllib.loads((alibi / "zoo_alibi" / "variants" / "registry.toml").read_text())[ALIBI_VARIANT]
    assert card["metrics"]["validation_loss"] < bigram


# -- broken plugins --------------------------------------------------------------------


def test_a_plugin_that_fails_to_import_is_reported_and_everything_else_works(alibi, broken, bare):
    path, env = (alibi, broken), {"ZOO_PLUGINS": "broken-import,alibi"}
    report = run_zoo("plugins", "--json", path=path, **env).json()
    failed = _plugins(report)["broken-import"]
    assert failed["distribution"] == "zoo-broken-import" and failed["registered"] == {}
    assert failed["errors"] == ["failed to import 'zoo_broken_import': ModuleNotFoundError: No module named 'zoo_missing_dependency'"]
    assert _plugins(report)["alibi"]["errors"] == []
    text = run_zoo("plugins", path=path, **env)
    assert "broken-import 0.0.1 (zoo-broken-import)\n  ERROR: failed to import 'zoo_broken_import'" in text.out
    # A problem fails the command, so `zoo plugins` can gate a plugin author's CI.
    assert text.code == 1 and text.err == (
        "zoo: error: 1 plugin problem (first: plugin 'broken-import': failed to import 'zoo_broken_import': "
        "ModuleNotFoundError: No module named 'zoo_missing_dependency')\n"
    )
    listed = run_zoo("list", "--json", path=path, **env)
    assert listed.code == 0 and {row["name"] for row in listed.json()} == {row["name"] for row in bare["list"]} | {ALIBI_VARIANT}
    assert run_zoo("show", ALIBI_VARIANT, path=path, **env).code == 0
    _check_alibi_samples(*path, **env)


def test_a_hook_that_raises_is_reported_and_everything_else_works(alibi, broken):
    path, env = (alibi, broken), {"ZOO_PLUGINS": "raising-hook,alibi"}
    report = run_zoo("plugins", "--json", path=path, **env).json()
    raising = _plugins(report)["raising-hook"]
    assert raising["errors"] == ["hook register_blocks raised RuntimeError: the block table is not ready"]
    assert raising["registered"] == {"positions": ["half-done"]}  # what it registered before raising stays
    assert "  ERROR: hook register_blocks raised RuntimeError" in run_zoo("plugins", path=path, **env).out
    listed = run_zoo("list", "--json", path=path, **env)
    assert listed.code == 0 and ALIBI_VARIANT in {row["name"] for row in listed.json()}
    _check_alibi_samples(*path, **env)


def test_a_name_already_taken_is_an_error_naming_both_plugins(alibi, broken):
    path, env = (alibi, broken), {"ZOO_PLUGINS": "alibi,clash"}
    report = run_zoo("plugins", "--json", path=path, **env).json()
    assert report["conflicts"] == ["position 'alibi' is registered by 'alibi' and 'clash'"]
    shown = run_zoo("plugins", path=path, **env)
    assert "CONFLICT: position 'alibi' is registered by 'alibi' and 'clash'" in shown.out and shown.code == 1
    # Neither silently wins: the variant that needs the name refuses to build.
    loaded = run_zoo("load", ALIBI_VARIANT, path=path, **env)
    assert loaded.code == 1
    assert loaded.err == (
        "zoo: error: position 'alibi' is registered by more than one plugin ('alibi' and 'clash'); uninstall or disable one\n"
    )
    listed = run_zoo("list", path=path, **env)
    assert listed.code == 0
    assert f"cannot build {ALIBI_VARIANT}: position 'alibi' is registered by 'alibi' and 'clash'" in listed.out


def test_a_variant_whose_checkpoint_is_missing_is_listed_and_load_says_so_in_one_line(broken):
    path, env = (broken,), {"ZOO_PLUGINS": "ghost"}
    rows = {row["name"]: row for row in run_zoo("list", "--json", path=path, **env).json()}
    assert rows["ghost-2b"]["layers"] == 2 and rows["ghost-2b"]["parameters"] is None
    assert _plugins(run_zoo("plugins", "--json", path=path, **env).json())["ghost"]["errors"] == []
    loaded = run_zoo("load", "ghost-2b", path=path, **env)
    assert loaded.code == 1 and "Traceback" not in loaded.err
    expected = broken / "zoo_ghost" / "ghost-2b.safetensors"
    assert loaded.err.startswith(f"zoo: error: {expected}: checkpoint file not found; ") and loaded.err.count("\n") == 1


def test_a_misspelled_hook_is_reported_instead_of_silently_doing_nothing(broken):
    report = run_zoo("plugins", "--json", path=(broken,), ZOO_PLUGINS="typo-hook").json()
    assert _plugins(report)["typo-hook"]["errors"] == [
        "'register_position' is not a zoo hook and is never called "
        "(hooks: register_adapters, register_blocks, register_datasets, register_families, register_models, "
        "register_positions, register_tokenizers, register_trainers, register_variants)"
    ]


def test_a_plugin_name_taken_by_a_built_in_is_reported_not_silently_skipped(broken, bare):
    report = run_zoo("plugins", "--json", path=(broken,), ZOO_PLUGINS="blocks").json()
    blocks = _plugins(report)["blocks"]
    assert blocks["builtin"] and blocks["registered"] == _plugins(bare["plugins"])["blocks"]["registered"]
    assert blocks["errors"] == ["plugin name 'blocks' is also claimed by zoo-blocks 0.0.1, which was not loaded"]


def test_all_broken_plugins_at_once_leave_listing_and_reporting_working(alibi, broken, bare):
    path = (alibi, broken)
    report = run_zoo("plugins", "--json", path=path).json()
    assert _third_party(report) == ["alibi", "broken-import", "clash", "ghost", "raising-hook", "typo-hook"]
    with_errors = sorted(name for name, p in _plugins(report).items() if p["errors"])
    assert with_errors == ["blocks", "broken-import", "raising-hook", "typo-hook"]
    listed = run_zoo("list", "--json", path=path)
    assert listed.code == 0
    assert {row["name"] for row in listed.json()} == {row["name"] for row in bare["list"]} | {ALIBI_VARIANT, "ghost-2b"}


# -- choosing plugins by environment -----------------------------------------------------


def test_disabling_autoload_leaves_only_the_built_ins(alibi, broken, bare):
    path, env = (alibi, broken), {"ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    assert run_zoo("plugins", "--json", path=path, **env).json() == bare["plugins"]
    assert run_zoo("list", "--json", path=path, **env).json() == bare["list"]


def test_zoo_plugins_variable_loads_only_the_named_third_party_plugins(alibi, broken, bare):
    path = (alibi, broken)
    report = run_zoo("plugins", "--json", path=path, ZOO_PLUGINS="alibi").json()
    assert _third_party(report) == ["alibi"]
    assert [p["name"] for p in report["plugins"] if p["builtin"]] == [p["name"] for p in bare["plugins"]["plugins"]]
    assert all(not p["errors"] for p in report["plugins"]) and report["conflicts"] == []
    two = run_zoo("plugins", "--json", path=path, ZOO_PLUGINS="ghost, clash").json()
    assert _third_party(two) == ["clash", "ghost"]


# -- zoo new-plugin ------------------------------------------------------------------------


def test_a_generated_skeleton_installs_shows_up_and_passes_its_own_tests(zoo, tmp_path):
    folder = tmp_path / "zoo-cope-demo"
    made = zoo("new-plugin", "cope-demo", "--dir", str(folder))
    assert made.code == 0, made.err
    assert "next: pip install -e" in made.out
    pip_install(tmp_path / "site", folder)
    report = run_zoo("plugins", "--json", path=(tmp_path / "site",)).json()
    assert _plugins(report)["cope-demo"] == {
        "name": "cope-demo", "distribution": "zoo-cope-demo", "version": "0.1.0", "builtin": False,
        "registered": {
            "tokenizers": ["cope-demo-bytes"], "positions": ["cope-demo"], "blocks": ["cope-demo-block"],
            "models": ["cope-demo-lm"], "trainers": ["cope-demo-trainer"], "adapters": ["cope-demo-head-delta"],
            "variant files": [str(tmp_path / "site" / "zoo_cope_demo" / "variants" / "registry.toml")],
            "datasets": ["cope-demo-sonnets"],
        },
        "errors": [],
    }
    # The installed skeleton passes the kit; its variant is listed, waiting for its weights.
    checked = run_zoo("check-plugin", "cope-demo", "--quick", path=(tmp_path / "site",))
    assert checked.code == 0, checked.out + checked.err
    assert "skip variant 'cope-demo-tiny': loads with verified weights: no weights yet" in checked.out
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=folder, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site"), "OMP_NUM_THREADS": "1"}, timeout=300,
    )
    assert tests.returncode == 0 and "3 passed" in tests.stdout, tests.stdout + tests.stderr


def _readme_commands(readme: str) -> list[list[str]]:
    """The commands of a README's indented block, comments and continuation lines dropped."""
    lines = [line.strip() for line in readme.splitlines() if line.startswith("    ") and line.strip()]
    return [shlex.split(line.split("  #")[0].split(" # ")[0]) for line in lines if not line.startswith("#")]


def _skeleton_readme(name: str) -> str:
    from string import Template

    from zoo_core.kit import scaffold

    return Template(scaffold._template("README.md.tmpl")).substitute(scaffold.plugin_names(name))


def test_the_skeletons_readme_takes_it_from_source_to_shipped_weights(zoo, tmp_path):
    """Every command of the generated README, in order, from its folder: the
    variant is trained into the package by name of its dataset, and shipped by
    reinstalling it (here into a scratch folder, so `pip install .` is run as
    an offline install into that folder)."""
    folder = tmp_path / "zoo-cope-ship"
    assert zoo("new-plugin", "cope-ship", "--dir", str(folder)).code == 0
    site = tmp_path / "site"
    commands = _readme_commands((folder / "README.md").read_text())
    assert [command[:2] for command in commands] == [
        ["pip", "install"], ["zoo", "plugins"], ["zoo", "check-plugin"], ["zoo", "train"], ["pip", "install"],
        ["zoo", "sample"], ["pytest"],
    ]
    installs = 0
    for command in commands:
        if command[0] == "pip":
            assert command == ["pip", "install", "."]
            pip_install(site, folder, again=installs > 0)
            installs += 1
        elif command[0] == "pytest":
            continue  # the skeleton's own tests: test_a_generated_skeleton_installs_shows_up_and_passes_its_own_tests
        else:
            done = run_zoo(*command[1:], path=(site,), cwd=folder)
            assert done.code == 0, (command, done.out, done.err)
            if command[1] == "check-plugin":
                assert "no weights yet" in done.out and "`zoo train cope-ship-tiny --publish --registry " \
                    "zoo_cope_ship/variants/registry.toml`" in done.out
                assert "dataset 'cope-ship-sonnets'" in done.out and "adapter 'cope-ship-head-delta'" in done.out
            if command[1] == "sample":
                assert done.out.startswith("Shall I")
    # docs/plugins.md's quick start is these commands, for a plugin named cope.
    guide = (ROOT / "docs" / "plugins.md").read_text().split("## Start in ten seconds")[1].split("The skeleton uses")[0]
    readme = _readme_commands(_skeleton_readme("cope"))
    for command in _readme_commands(guide):
        if command[:2] in (["zoo", "new-plugin"], ["cd", "zoo-cope"]):
            continue
        assert [word.replace("./zoo-cope", ".") for word in command] in readme, command
    shipped = site / "zoo_cope_ship" / "variants"
    assert (shipped / "cope-ship-tiny.safetensors").is_file()
    card = tomllib.loads((shipped / "registry.toml").read_text())["cope-ship-tiny"]
    assert card["recipe"]["data"] == "cope-ship-sonnets" and card["checkpoint"]["sha256"]
    loaded = run_zoo("load", "cope-ship-tiny", path=(site,), cwd=tmp_path)
    assert loaded.code == 0, loaded.err


def test_new_plugin_writes_zoo_name_in_the_current_folder_by_default(zoo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert zoo("new-plugin", "my-bias").code == 0
    package = tmp_path / "zoo-my-bias" / "zoo_my_bias"
    assert 'register("my-bias", "zoo_my_bias.positions:MyBiasPositions")' in (package / "__init__.py").read_text()
    assert "class MyBiasPositions(PositionEncodingBase)" in (package / "positions.py").read_text()


@pytest.mark.parametrize(
    "name, message",
    [
        ("Cope!", "'Cope!' is not a plugin name"),
        ("2cope", "'2cope' is not a plugin name"),
        ("sinusoidal", "position 'sinusoidal' is already registered by plugin 'positions'"),
        ("blocks", "a plugin named 'blocks' is already installed (zoo-lm)"),
    ],
)
def test_new_plugin_refuses_bad_or_taken_names_in_one_line(zoo, tmp_path, name, message):
    result = zoo("new-plugin", name, "--dir", str(tmp_path / "out"))
    assert result.code == 1
    assert result.err.startswith(f"zoo: error: {message}") and result.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_new_plugin_refuses_a_folder_that_is_not_empty(zoo, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = zoo("new-plugin", "demo-pos", "--dir", str(tmp_path))
    assert result.code == 1
    assert result.err == f"zoo: error: {tmp_path}: already exists and is not an empty directory; choose another --dir\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert zoo("new-plugin", "demo-pos", "--dir", str(empty)).code == 0



# -- built-in names cannot be taken ---------------------------------------------------------


@pytest.fixture(scope="session")
def thief(tmp_path_factory) -> Path:
    """A plugin that registers a position named 'learned' (a built-in's) and a trainer named 'trained'."""
    root = tmp_path_factory.mktemp("thief")
    source = write_package(root, "thief", """\
        from zoo_core import hookimpl

        @hookimpl
        def register_positions(register):
            register("learned", "zoo_thief:NotPositions")

        @hookimpl
        def register_trainers(register):
            register("trained", "zoo_thief:NotATrainer")
        """)
    pip_install(root / "site", source)
    return root / "site"


def test_a_third_party_claim_on_built_in_names_is_refused_and_every_built_in_variant_still_loads(thief, bare):
    report = run_zoo("plugins", "--json", path=(thief,))
    plugins = _plugins(report.json())
    assert plugins["thief"]["errors"] == [
        "position 'learned' belongs to the built-in plugin 'positions'; this plugin's 'learned' was refused (choose another name)",
        "trainer 'trained' belongs to the built-in plugin 'trainers'; this plugin's 'trained' was refused (choose another name)",
    ]
    assert plugins["thief"]["registered"] == {} and plugins["positions"]["errors"] == []
    assert report.json()["conflicts"] == [] and report.code == 1  # the refusal fails `zoo plugins`
    listed = run_zoo("list", "--json", path=(thief,))
    assert listed.code == 0 and listed.json() == bare["list"]  # nothing marked unbuildable
    assert all(row["unbuildable"] is None for row in listed.json())
    loaded = run_zoo("load", "gpt-char-mini", "--json", path=(thief,))
    assert loaded.code == 0, loaded.err
