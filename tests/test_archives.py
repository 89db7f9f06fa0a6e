"""One-file archives: `zoo pack` and `zoo install` (zoo_core.sharing.archives).

An archive packed on one machine installs on another (a second ZOO_HOME whose
built-in catalogue lacks the variant) and scores and samples exactly as the
original; every hostile archive is refused in one line with nothing installed.
Hostile archives are written by hand from a good one, re-signed where the
manifest must stay consistent so that the check under test is the one that fires.
"""

from __future__ import annotations

import hashlib
import json
import stat
import struct
import time
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest

import zoo_core
from zoo_core.catalogue.registry import read_registry_file, render_registry
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.sharing import archives

SMALL = "transformer-1b-learned-ctx8"


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture
def packed(zoo, tmp_path) -> Path:
    out = tmp_path / "small.zoo"
    result = zoo("pack", SMALL, "--out", str(out))
    assert result.code == 0, result.err
    return out


def _members(archive: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(archive) as opened:
        return {info.filename: opened.read(info) for info in opened.infolist()}


def _write(
    path: Path,
    members: dict[str, bytes],
    sign: bool = True,
    links: tuple[str, ...] = (),
    deflated: tuple[str, ...] = (),
) -> Path:
    """Write ``members`` as a zip, ``deflated`` ones compressed; ``sign`` recomputes the
    manifest's sizes and sha256 for every member it lists (so only the change under test is wrong)."""
    if sign:
        manifest = json.loads(members["manifest.json"])
        for entry in manifest["members"]:
            if entry["name"] in members:
                data = members[entry["name"]]
                entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        members = {**members, "manifest.json": json.dumps(manifest).encode()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate a test writes on purpose
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members.items():
                info = zipfile.ZipInfo(name.split("\0")[0], date_time=(1980, 1, 1, 0, 0, 0))
                info.create_system = 3
                info.external_attr = ((stat.S_IFLNK | 0o777) if name in links else (stat.S_IFREG | 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED
                archive.writestr(info, data)
    return path


def _edit_card(members: dict[str, bytes], change) -> dict[str, bytes]:
    card = json.loads(members["card.json"])
    change(card)
    return {**members, "card.json": json.dumps(card).encode()}


def _edit_manifest(members: dict[str, bytes], change) -> dict[str, bytes]:
    manifest = json.loads(members["manifest.json"])
    change(manifest)
    return {**members, "manifest.json": json.dumps(manifest).encode()}


# --- packing -----------------------------------------------------------------


def test_packing_twice_gives_identical_bytes(zoo, tmp_path, packed):
    again = tmp_path / "again.zoo"
    assert zoo("pack", SMALL, "--out", str(again)).code == 0
    assert again.read_bytes() == packed.read_bytes()
    with zipfile.ZipFile(packed) as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == [
        "manifest.json",
        "card.json",
        "weights.safetensors",
        "tokenizer.tiktoken",
        "history.json",
    ]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {stat.S_IFREG | 0o644}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    manifest = archives.archive_manifest(packed)
    assert manifest["variant"] == SMALL
    assert {p["distribution"] for p in manifest["plugins"]} == {"zoo-lm"}
    assert {(p["kind"], p["component"]) for p in manifest["plugins"]} >= {("models", "transformer"), ("tokenizers", "bpe")}
    card = json.loads(_members(packed)["card.json"])
    assert card["checkpoint"]["path"] == "weights.safetensors" and card["tokenizer"]["file"] == "tokenizer.tiktoken"
    assert str(Path.cwd()) not in _members(packed)["card.json"].decode()  # no absolute paths of this machine


def test_pack_writes_name_dot_zoo_in_the_current_folder_by_default(zoo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = zoo("pack", SMALL)
    assert result.code == 0, result.err
    assert (tmp_path / f"{SMALL}.zoo").is_file()


def test_packing_a_variant_without_weights_is_refused(zoo, tmp_path):
    _one_line_error(zoo("pack", "gpt-char", "--out", str(tmp_path / "x.zoo")), "no published weights")
    assert not (tmp_path / "x.zoo").exists()


# --- installing on another machine ---------------------------------------------


def test_installed_elsewhere_it_scores_and_samples_as_the_original(zoo, packed, tmp_path, monkeypatch):
    prompt = ("--prompt", "ROMEO:", "--max-new-tokens", "24", "--seed", "7")
    original = zoo("sample", SMALL, *prompt)
    assert original.code == 0, original.err
    card_loss = zoo_core.get_variant(SMALL).card.metrics.validation_loss
    archive_sha256 = hashlib.sha256(packed.read_bytes()).hexdigest()

    empty = tmp_path / "elsewhere" / "registry.toml"
    empty.parent.mkdir()
    empty.write_text("")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "elsewhere" / "home"))
    monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(empty))
    get_plugins(reload=True)
    try:
        assert zoo("show", SMALL).code == 1  # not on this machine yet
        result = zoo("install", str(packed))
        assert result.code == 0, result.err
        evaluated = json.loads(zoo("eval", SMALL, "--json", "--text-chars", "100").out)
        assert round(evaluated["validation_loss"], 4) == card_loss
        assert zoo("sample", SMALL, *prompt).out == original.out
        shown = zoo("show", SMALL)
        assert archive_sha256 in shown.out and str(packed) in shown.out
        origin = zoo_core.get_variant(SMALL).card.origin
        assert origin.archive_sha256 == archive_sha256 and origin.source == str(packed)
        verified = zoo("verify")
        assert verified.code == 0 and SMALL in verified.out, verified.out + verified.err
        # Packed again there, it is the same archive: nothing of the install leaked into the card.
        assert zoo("pack", SMALL, "--out", str(tmp_path / "again.zoo")).code == 0
        assert (tmp_path / "again.zoo").read_bytes() == packed.read_bytes()
    finally:
        monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
        get_plugins(reload=True)


def test_install_under_a_new_name(zoo, packed, private_home):
    result = zoo("install", str(packed), "--name", "my-copy")
    assert result.code == 0, result.err
    loaded = zoo("load", "my-copy", "--json")
    assert loaded.code == 0, loaded.err
    assert zoo_core.load("my-copy").verification.card_checked  # the header's card names the new variant
    assert sorted(p.name for p in (private_home / "checkpoints").iterdir()) == [
        "my-copy.history.json",
        "my-copy.safetensors",
        "my-copy.tokenizer.tiktoken",
    ]
    original = ("--prompt", "ROMEO:", "--max-new-tokens", "16", "--seed", "3")
    assert zoo("sample", "my-copy", *original).out == zoo("sample", SMALL, *original).out
    assert zoo("remove", "my-copy").code == 0
    assert _files(private_home / "checkpoints") == []


def test_a_name_clash_names_both_layers_and_suggests_name(zoo, packed, private_home):
    result = zoo("install", str(packed))
    _one_line_error(result, "built-in catalogue", "user catalogue", "--name")
    assert _files(private_home) == []
    assert zoo("install", str(packed), "--name", "copy-a").code == 0
    _one_line_error(zoo("install", str(packed), "--name", "copy-a"), "user catalogue", "--name")


def test_the_python_api_records_a_given_origin(packed, private_home):
    card = archives.install_archive(
        packed, "from-remote", origin={"source": "http://example.invalid/a.zoo", "remote": "lab"}
    )
    assert card.origin.remote == "lab" and card.origin.source == "http://example.invalid/a.zoo"
    assert zoo_core.get_variant("from-remote").card.origin == card.origin
    assert archives.read_archive_card(packed).name == SMALL


# --- hostile archives ----------------------------------------------------------


def _tamper_byte(members: dict[str, bytes]) -> dict[str, bytes]:
    weights = bytearray(members["weights.safetensors"])
    weights[-1] ^= 0x01
    return {**members, "weights.safetensors": bytes(weights)}


def _missing_plugin(members):
    members = _edit_card(members, lambda card: card.update(architecture="mystery-net"))

    def swap(manifest):
        for entry in manifest["plugins"]:
            if entry["kind"] == "models":
                entry.update(component="mystery-net", plugin="mystery", distribution="zoo-mystery", version="1.2")

    return _edit_manifest(members, swap)


HOSTILE = {
    "outside": (lambda m: {**m, "../x": b"x"}, True, (), "points outside"),
    "nested-outside": (lambda m: {**m, "a/../../x": b"x"}, True, (), "points outside"),
    "absolute": (lambda m: {**m, "/etc/x": b"x"}, True, (), "absolute path"),
    "symlink": (lambda m: {**m, "link": b"/etc/passwd"}, True, ("link",), "symbolic link"),
    "folder": (lambda m: {**m, "sub/x": b"x"}, True, (), "not a plain file name"),
    "duplicate": (lambda m: {**m, "history.json\0again": b"{}"}, False, (), "more than once"),
    "lying-sha256": (_tamper_byte, False, (), "sha256"),
    "lying-size": (
        lambda m: _edit_manifest(m, lambda man: man["members"][-1].update(size=man["members"][-1]["size"] + 1)),
        False,
        (),
        "the manifest says",
    ),
    "unlisted-member": (lambda m: {**m, "extra.json": b"{}"}, True, (), "not in the manifest"),
    "missing-member": (
        lambda m: {k: v for k, v in m.items() if k != "history.json"},
        True,
        (),
        "missing from the archive",
    ),
    "no-manifest": (lambda m: {k: v for k, v in m.items() if k != "manifest.json"}, False, (), "no manifest.json"),
    "manifest-not-json": (lambda m: {**m, "manifest.json": b"{nope"}, False, (), "not JSON"),
    "card-schema": (lambda m: _edit_card(m, lambda c: c.update(context_length=-1)), True, (), "not a valid card"),
    "card-external-paths": (
        lambda m: _edit_card(m, lambda c: c.update(allow_external_paths=True)),
        True,
        (),
        "allow_external_paths",
    ),
    "card-tokenizer-elsewhere": (
        lambda m: _edit_card(m, lambda c: c["tokenizer"].update(file="../../etc/passwd")),
        True,
        (),
        "tokenizer.file",
    ),
    "weights-not-the-card": (
        lambda m: _edit_card(m, lambda c: c["config"].update(n_layer=2)),
        True,
        (),
        "tensors do not match",
    ),
    "weights-another-recipe": (
        lambda m: _edit_card(m, lambda c: c["recipe"].update(learning_rate=0.5)),
        True,
        (),
        "disagrees",
    ),
    "missing-plugin": (_missing_plugin, True, (), "pip install 'zoo-mystery==1.2'"),
    "history-nested-deep": (
        lambda m: {**m, "history.json": b"[" * 5000 + b"]" * 5000},
        True,
        (),
        "history.json: not a training history (not JSON",
    ),
    "history-wrong-types": (
        lambda m: {**m, "history.json": b'{"variant": "x", "recipe": [], "history": [{"step": "one"}]}'},
        True,
        (),
        "history.json: not a training history (field 'recipe'",
    ),
    "history-not-an-object": (lambda m: {**m, "history.json": b"[1, 2]"}, True, (), "not a training history"),
    "card-nested-deep": (lambda m: {**m, "card.json": b"{" + b'"a":{' * 3000}, True, (), "card.json is not JSON"),
    "manifest-nested-deep": (
        lambda m: {**m, "manifest.json": b"[" * 3000 + b"]" * 3000},
        False,
        (),
        "manifest.json is not JSON (Invalid JSON: recursion limit exceeded",
    ),
    "weights-longer-than-their-header": (
        lambda m: {**m, "weights.safetensors": m["weights.safetensors"] + bytes(64)},
        True,
        (),
        "safetensors header accounts for",
    ),
    "weights-not-safetensors": (
        lambda m: {**m, "weights.safetensors": b"\xff" * 8 + b"{}"},
        True,
        (),
        "'weights.safetensors' is not a safetensors file (its header length does not fit its 10 bytes)",
    ),
    "weights-beyond-the-card": (
        lambda m: _edit_card(m, lambda c: c.update(parameters=100)),
        True,
        (),
        "more than 8 per parameter of the card's 100",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_in_one_line_with_nothing_installed(
    zoo, packed, tmp_path, private_home, case
):
    change, sign, links, fragment = HOSTILE[case]
    hostile = _write(tmp_path / f"{case}.zoo", change(_members(packed)), sign=sign, links=links)
    before = _files(private_home)
    _one_line_error(zoo("install", str(hostile), "--name", "incoming"), fragment)
    assert _files(private_home) == before
    assert zoo("show", "incoming").code == 1


def test_an_oversized_member_is_refused_before_it_is_read(zoo, packed, private_home, monkeypatch):
    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 100_000)
    _one_line_error(zoo("install", str(packed), "--name", "incoming"), "weights.safetensors", "more than the limit")
    monkeypatch.setattr(archives, "MAX_MEMBER_BYTES", 10**9)
    monkeypatch.setattr(archives, "MAX_ARCHIVE_BYTES", 100_000)
    _one_line_error(zoo("install", str(packed), "--name", "incoming"), "more than the limit")
    assert _files(private_home) == []


def test_not_an_archive_and_a_missing_file_are_one_line(zoo, tmp_path, private_home):
    junk = tmp_path / "junk.zoo"
    junk.write_bytes(b"not a zip at all" * 10)
    _one_line_error(zoo("install", str(junk)), "not a zoo archive")
    _one_line_error(zoo("install", str(tmp_path / "absent.zoo")), "archive not found")
    _one_line_error(zoo("install", str(tmp_path)), "not a regular file")
    assert _files(private_home) == []


def test_a_bad_new_name_is_refused(zoo, packed, private_home):
    _one_line_error(zoo("install", str(packed), "--name", "Bad Name"), "--name")
    assert _files(private_home) == []


def test_the_manifest_is_read_without_hashing_the_members(packed, tmp_path):
    # archive_manifest is the cheap check an index runs: it does not read the weights.
    lying = _write(tmp_path / "lying.zoo", _tamper_byte(_members(packed)), sign=False)
    assert archives.archive_manifest(lying)["variant"] == SMALL
    with pytest.raises(zoo_core.ZooError, match="sha256"):
        archives.install_archive(lying, "incoming")


def test_an_installed_member_is_extracted_only_to_the_staging_folder(packed, tmp_path, private_home):
    # Members are plain names: nothing can be written outside $ZOO_HOME, even by a
    # member name that would be a path elsewhere.
    hostile = _write(tmp_path / "h.zoo", {**_members(packed), "../escaped": b"x"})
    with pytest.raises(zoo_core.ZooError):
        archives.install_archive(hostile, "incoming")
    assert not (tmp_path / "escaped").exists() and not (private_home.parent / "escaped").exists()


def test_members_are_stored_as_they_are(packed):
    # The archive is stored, not compressed: each member's bytes appear in it as they are.
    data = packed.read_bytes()
    for name, content in _members(packed).items():
        assert content in data, name


def test_an_adapter_names_its_base_and_installs_only_beside_it(zoo, tmp_path, private_home, monkeypatch):
    song = tmp_path / "song.txt"
    song.write_text("ROMEO: the adapter learns a little song.\n" * 200, encoding="utf-8")
    quick = ("--data", str(song), "--steps", "1", "--set", "eval_windows=16", "--quiet")
    assert zoo("train", "my-lora", "--from", "gpt-char-mini", "--trainer", "lora", *quick).code == 0
    archive = tmp_path / "lora.zoo"
    assert zoo("pack", "my-lora", "--out", str(archive)).code == 0
    base_sha256 = zoo_core.get_variant("gpt-char-mini").card.checkpoint.sha256
    manifest = archives.archive_manifest(archive)
    assert manifest["base"] == {"name": "gpt-char-mini", "sha256": base_sha256}
    assert ("adapters", "lora") in {(p["kind"], p["component"]) for p in manifest["plugins"]}

    result = zoo("install", str(archive), "--name", "lora-copy")
    assert result.code == 0, result.err
    prompt = ("--prompt", "ROMEO:", "--max-new-tokens", "12", "--seed", "2")
    assert zoo("sample", "lora-copy", *prompt).out == zoo("sample", "my-lora", *prompt).out

    # Elsewhere, without the base, it is refused and nothing is installed.
    empty = tmp_path / "elsewhere" / "registry.toml"
    empty.parent.mkdir()
    empty.write_text("")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "elsewhere" / "home"))
    monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(empty))
    get_plugins(reload=True)
    try:
        _one_line_error(zoo("install", str(archive)), "base variant 'gpt-char-mini'", "install it first")
        assert not (tmp_path / "elsewhere" / "home").exists()
    finally:
        monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
        get_plugins(reload=True)


def test_a_file_in_the_way_is_refused_and_left_as_it_was(zoo, packed, private_home):
    (private_home / "checkpoints").mkdir(parents=True)
    orphan = private_home / "checkpoints" / "incoming.safetensors"
    orphan.write_bytes(b"someone else's")
    _one_line_error(zoo("install", str(packed), "--name", "incoming"), "already exists", "--name")
    assert orphan.read_bytes() == b"someone else's"
    assert _files(private_home) == ["checkpoints", "checkpoints/incoming.safetensors"]


# --- limits that hold before the directory or a member is read -------------------


def _central_entry(data: bytes, name: str) -> int:
    """Where the central directory's entry for ``name`` starts in ``data``."""
    at = data.index(b"PK\x01\x02")
    while data[at + 46 : at + 46 + len(name)] != name.encode():
        at = data.index(b"PK\x01\x02", at + 4)
    return at


def test_a_deflated_member_is_refused_before_anything_is_written(zoo, packed, tmp_path, private_home):
    """A 50 MB history of zeros deflates to 51 KB: refused by its method, never inflated."""
    members = {**_members(packed), "history.json": bytes(50 * 1024 * 1024)}
    bomb = _write(tmp_path / "bomb.zoo", members, deflated=("history.json",))
    assert bomb.stat().st_size < 1024 * 1024
    _one_line_error(zoo("install", str(bomb)), "member 'history.json' is compressed (deflated)", "stores its members")
    assert _files(private_home) == []


def test_a_member_whose_directory_entry_lies_about_its_size_is_refused(zoo, packed, tmp_path, private_home):
    data = bytearray(packed.read_bytes())
    entry = _central_entry(bytes(data), "weights.safetensors")
    data[entry + 24 : entry + 28] = struct.pack("<L", 10**9)  # uncompressed size; the stored size stays
    lying = tmp_path / "lying.zoo"
    lying.write_bytes(bytes(data))
    _one_line_error(zoo("install", str(lying)), "'weights.safetensors' is stored as", "claims 1,000,000,000")
    data[entry + 20 : entry + 24] = struct.pack("<L", 10**9)  # both: more bytes than the whole archive
    lying.write_bytes(bytes(data))
    _one_line_error(zoo("install", str(lying)), "the members claim", "more than the archive's")
    assert _files(private_home) == []


def _end_records(members: int, directory: int) -> bytes:
    """A zip64 end record, its locator and the classic end record pointing at it:
    what an archive listing ``members`` in a ``directory`` of that size ends with."""
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, members, members, directory, 0)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, 0, 1)
    return record + locator + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)


def test_an_end_record_listing_a_million_members_is_refused_at_once(zoo, tmp_path, private_home):
    """The 54 MB archive of a million members took 39 s and 531 MB before its
    refusal: the end record is read first now, and nothing else is."""
    hostile = tmp_path / "million.zoo"
    tail = _end_records(1_000_000, 46_000_000)
    with open(hostile, "wb") as out:
        out.truncate(54_000_000 - len(tail))  # sparse: the size is real, the bytes cost nothing
        out.seek(0, 2)
        out.write(tail)
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(zoo_core.ZooError, match="lists 1,000,000 members, more than a variant needs"):
        archives.archive_manifest(hostile)
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 0.5 and peak < 1024 * 1024, (elapsed, peak)
    _one_line_error(zoo("install", str(hostile)), "1,000,000 members")
    assert _files(private_home) == []


def test_an_end_record_claiming_a_large_directory_is_refused(zoo, packed, tmp_path, private_home):
    data = bytearray(packed.read_bytes())
    data[-22 + 12 : -22 + 16] = struct.pack("<L", 50_000_000)  # the directory's size, five members still
    hostile = tmp_path / "directory.zoo"
    hostile.write_bytes(bytes(data))
    _one_line_error(zoo("install", str(hostile)), "directory is 50,000,000 bytes, more than 8 members need")
    with_comment = tmp_path / "comment.zoo"
    with_comment.write_bytes(packed.read_bytes()[:-2] + struct.pack("<H", 2) + b"hi")
    _one_line_error(zoo("install", str(with_comment)), "no zip end record in its last 22 bytes")
    assert _files(private_home) == []


# --- a base and its adapters ------------------------------------------------------


@pytest.fixture
def base_with_adapter(zoo, tmp_path, private_home):
    """gpt-char-mini installed from its archive as my-base, and a LoRA adapter
    trained from it, which names my-base's own tokenizer file."""
    archive = tmp_path / "base.zoo"
    assert zoo("pack", "gpt-char-mini", "--out", str(archive)).code == 0
    assert zoo("install", str(archive), "--name", "my-base").code == 0
    song = tmp_path / "song.txt"
    song.write_text("ROMEO: the adapter learns a little song.\n" * 200, encoding="utf-8")
    quick = ("--data", str(song), "--steps", "1", "--set", "eval_windows=16", "--quiet")
    trained = zoo("train", "my-lora", "--from", "my-base", "--trainer", "lora", *quick)
    assert trained.code == 0, trained.err
    assert zoo_core.get_variant("my-lora").card.tokenizer.file == "checkpoints/my-base.tokenizer.json"
    return archive


def test_removing_a_base_its_adapters_use_is_refused_naming_them(zoo, private_home, base_with_adapter):
    before = {path: path.read_bytes() for path in private_home.rglob("*") if path.is_file()}
    _one_line_error(
        zoo("remove", "my-base"),
        "variant 'my-base' is the base of the adapter 'my-lora'",
        "nothing was deleted",
        "zoo remove my-base --with-adapters",
    )
    assert {path: path.read_bytes() for path in private_home.rglob("*") if path.is_file()} == before


def test_a_base_removed_with_its_adapters_can_be_installed_again(zoo, private_home, base_with_adapter):
    removed = zoo("remove", "my-base", "--with-adapters")
    assert removed.code == 0, removed.err
    assert removed.out.startswith("removed 'my-base' and its adapters 'my-lora' from your catalogue")
    assert zoo("show", "my-lora").code == 1
    assert [p.name for p in (private_home / "checkpoints").glob("*") if not p.name.endswith(".log.jsonl")] == []
    again = zoo("install", str(base_with_adapter), "--name", "my-base")
    assert again.code == 0, again.err
    assert zoo("verify").code == 0


def test_a_base_removed_alone_by_an_older_zoo_can_be_installed_again(zoo, private_home, base_with_adapter):
    """An older `zoo remove` took the base and kept the tokenizer file its adapter
    names: the same bytes are no clash, and the base installs again beside it."""
    registry = private_home / "registry.toml"
    kept = [v.card for v in read_registry_file(registry, "user", layer="user") if v.name != "my-base"]
    registry.write_text(render_registry(kept, ""), encoding="utf-8")
    (private_home / "checkpoints" / "my-base.safetensors").unlink()
    again = zoo("install", str(base_with_adapter), "--name", "my-base")
    assert again.code == 0, again.err
    verified = zoo("verify")
    assert verified.code == 0 and "my-lora" in verified.out, verified.out + verified.err
