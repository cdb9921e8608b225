"""The run manifest on a local folder and on an fsspec URL (memory://)."""
from __future__ import annotations

import os
import uuid

import pytest
from kmigrate.manifest import Manifest, ManifestConflict, ManifestError


@pytest.fixture(params=["local", "memory"])
def location(request, tmp_path):
    return str(tmp_path / "state") if request.param == "local" else f"memory://kmigrate-{uuid.uuid4().hex}"


def test_write_read_and_list_parts(location):
    manifest = Manifest(location, "run-1")
    assert manifest.read("snapshot") is None and manifest.parts() == []
    manifest.write_once("snapshot", {"topics": {"a": [0, 10]}})
    manifest.write_once("results/a-0", {"records": 10})
    assert manifest.read("snapshot") == {"topics": {"a": [0, 10]}}
    assert manifest.parts() == ["results/a-0", "snapshot"]
    assert Manifest(location, "run-2").parts() == []  # runs do not see each other's parts


def test_a_part_is_never_overwritten(location):
    manifest = Manifest(location, "run-1")
    manifest.write_once("snapshot", {"end": 10})
    assert manifest.write_once("snapshot", {"end": 10}) == {"end": 10}  # the same again: a no-op
    with pytest.raises(ManifestConflict, match="'snapshot'.*never overwritten.*new run id"):
        manifest.write_once("snapshot", {"end": 11})
    assert manifest.read("snapshot") == {"end": 10}


def test_get_or_create_computes_once(location):
    manifest = Manifest(location, "run-1")
    calls = []

    def take_snapshot():
        calls.append(1)
        return {"end": len(calls)}

    assert manifest.get_or_create("snapshot", take_snapshot) == {"end": 1}
    assert manifest.get_or_create("snapshot", take_snapshot) == {"end": 1}  # a re-run reads it back
    assert calls == [1]


def test_no_temporary_files_are_left(tmp_path):
    manifest = Manifest(str(tmp_path), "run-1")
    manifest.write_once("snapshot", {"a": 1})
    assert sorted(os.listdir(tmp_path / "run-1")) == ["snapshot.json"]


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    manifest = Manifest(str(blocker), "run-1")
    with pytest.raises(ManifestError, match=r"part 'snapshot' of the run manifest at .*not-a-folder/run-1 failed.*writable"):
        manifest.write_once("snapshot", {"a": 1})


def test_bad_names_are_refused(tmp_path):
    with pytest.raises(ManifestError, match="run id"):
        Manifest(str(tmp_path), "../escape")
    with pytest.raises(ManifestError, match="part name"):
        Manifest(str(tmp_path), "run-1").write_once("../x", {})
    with pytest.raises(ManifestError, match="cannot be opened"):
        Manifest("nosuchprotocol://bucket/state", "run-1")


def test_a_local_state_location_is_the_owners_only(tmp_path):
    import os
    import stat
    state = tmp_path / "state" / "deeper"
    manifest = Manifest(str(state), "run-1")
    manifest.write_once("snapshot", {"a": 1})
    manifest.write_once("attempts/x/copy", {"b": 2})
    manifest.put_file("report.md", b"report")
    for path in [state, *state.rglob("*")]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) != 0o700  # above the state location: as the umask says
