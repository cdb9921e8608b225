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
    with pytest.raises(ManifestError, match="run name '../escape' is refused.*letters, digits"):
        Manifest(str(tmp_path), "../escape")
    with pytest.raises(ManifestError, match="part name"):
        Manifest(str(tmp_path), "run-1").write_once("../x", {})
    with pytest.raises(ManifestError, match="nosuchprotocol:// is not a supported file system.*s3://"):
        Manifest("nosuchprotocol://bucket/state", "run-1")


@pytest.mark.parametrize("name, words", [
    ("x::memory", ("'x::memory'", "never '::'", "chain")),
    ("a" * 201, ("201 characters", "1 to 200")),
    ("a" * 300, ("300 characters", "1 to 200")),
])
def test_run_names_that_fsspec_or_the_file_system_would_misread_are_refused(tmp_path, name, words):
    with pytest.raises(ManifestError) as refused:
        Manifest(str(tmp_path / "state"), name)
    assert all(word in str(refused.value) for word in words), str(refused.value)
    assert not (tmp_path / "state").exists()


def test_airflow_run_ids_and_long_names_up_to_the_cap_are_run_names(tmp_path):
    for name in ("manual__2026-11-25T16:00:00.123456+00:00", "scheduled__2026-11-25T16:00:00+00:00", "a" * 200):
        manifest = Manifest(str(tmp_path), name)
        manifest.write_once("events/connectors-resumed", {"at": "now"})
        assert manifest.read("events/connectors-resumed") == {"at": "now"}
        assert (tmp_path / name / "events" / "connectors-resumed.json").exists()


@pytest.mark.parametrize("location, words", [
    ("http://127.0.0.1:1/state", ("'http://127.0.0.1:1/state'", "web server", "s3://")),
    ("https://example.com/state", ("web server", "absolute local path")),
    ("simplecache::file:///tmp/state", ("chain", "'::'")),
    ("relative/state", ("must be absolute",)),
    ("ftp://host/state", ("ftp:// is not a supported",)),
])
def test_state_locations_other_than_a_folder_or_an_object_store_are_refused(location, words):
    with pytest.raises(ManifestError) as refused:
        Manifest(location, "run-1")
    assert all(word in str(refused.value) for word in words), str(refused.value)


def test_object_store_and_file_urls_are_state_locations(tmp_path):
    Manifest(f"file://{tmp_path}", "run-1").write_once("snapshot", {"a": 1})
    assert Manifest(str(tmp_path), "run-1").read("snapshot") == {"a": 1}
    Manifest("s3://bucket/state", "run-1") if _installed("s3fs") else None


def _installed(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("content, words", [
    (b"", ("is empty",)),
    (b'{"topics": {"a": [0, 1', ("cut short",)),
    (b"\x00" * 64, ("cut short",)),
    (b"[1, 2]\n", ("JSON list, not an object",)),
    (b"null\n", ("JSON NoneType, not an object",)),
])
def test_a_part_that_is_not_whole_is_a_clear_error_not_a_step_done(location, content, words):
    manifest = Manifest(location, "run-1")
    manifest.write_once("events/connectors-stopped", {"at": "then"})
    part = "events/connectors-resumed"
    with manifest._fs.open(manifest._path(part), "wb") as handle:  # as a power loss leaves it
        handle.write(content)
    for look in (lambda: manifest.read(part), lambda: manifest.exists(part),
                 lambda: manifest.write_once(part, {"at": "now"}), lambda: manifest.get_or_create(part, dict)):
        with pytest.raises(ManifestError) as refused:
            look()
        text = str(refused.value)
        assert "'events/connectors-resumed'" in text and "connectors-resumed.json" in text and "not whole" in text
        assert "Delete" in text and "run again" in text and all(word in text for word in words), text
    assert manifest.exists("events/connectors-stopped") and not manifest.exists("events/other")


def test_a_part_is_synced_to_disk_before_and_its_folder_after_it_is_in_place(tmp_path, monkeypatch):
    import stat as stat_mod
    calls = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(
        ("fsync", "folder" if stat_mod.S_ISDIR(os.fstat(fd).st_mode) else "file")), real_fsync(fd))[1])
    monkeypatch.setattr(os, "link", lambda a, b: (calls.append(("link", os.path.basename(b))), real_link(a, b))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", os.path.basename(b))),
                                                     real_replace(a, b))[1])
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    manifest.write_once("events/connectors-resumed", {"at": "now"})
    # the file, in place by a link (written once), then its folder and the folders made for it
    assert calls[:3] == [("fsync", "file"), ("link", "connectors-resumed.json"), ("fsync", "folder")], calls
    assert calls[3:] == [("fsync", "folder")] * 3, calls  # events/ in run-1/, run-1/ in state/, state/ in tmp
    calls.clear()
    manifest.write_once("snapshot", {"a": 1})
    assert calls == [("fsync", "file"), ("link", "snapshot.json"), ("fsync", "folder")]
    calls.clear()
    manifest.put_file("report.md", b"report")  # replaced on every write
    assert calls == [("fsync", "file"), ("replace", "report.md"), ("fsync", "folder")]
    assert sorted(os.listdir(tmp_path / "state" / "run-1")) == ["events", "report.md", "snapshot.json"]


def _race(location: str, part: str, barrier, me: int, results) -> None:
    barrier.wait()
    try:
        Manifest(location, "race").write_once(part, {"writer": me})
        results.put((part, me, "won"))
    except ManifestConflict:
        results.put((part, me, "conflict"))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results.put((part, me, repr(exc)))


def test_of_writers_racing_on_one_part_exactly_one_wins(tmp_path):
    import multiprocessing
    context = multiprocessing.get_context("fork")
    writers, rounds = 4, 15
    results = context.Queue()
    for n in range(rounds):
        barrier = context.Barrier(writers)
        part = f"events/e{n}"
        processes = [context.Process(target=_race, args=(str(tmp_path), part, barrier, me, results))
                     for me in range(writers)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        outcomes = sorted(results.get(timeout=10) for _ in range(writers))
        winners = [me for _, me, outcome in outcomes if outcome == "won"]
        assert len(winners) == 1, outcomes
        assert all(outcome in ("won", "conflict") for _, _, outcome in outcomes), outcomes
        assert Manifest(str(tmp_path), "race").read(part) == {"writer": winners[0]}
    assert not [f for f in os.listdir(tmp_path / "race" / "events") if ".tmp-" in f]


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_state_folder_others_may_write_is_refused(tmp_path, mode):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, mode)
    with pytest.raises(ManifestError, match=rf"state folder {state} is refused.*mode {mode:04o}.*chmod 700 {state}"):
        Manifest(str(state), "run-1")
    os.chmod(state, 0o755)
    (state / "run-1").mkdir(mode=0o700)
    os.chmod(state / "run-1", mode)
    with pytest.raises(ManifestError, match=rf"state folder {state}/run-1 is refused"):
        Manifest(str(state), "run-1")
    assert sorted(os.listdir(state / "run-1")) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_a_state_folder_of_another_user_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    with pytest.raises(ManifestError, match=rf"state folder {state} is refused: it is owned by .*uid 65534.*chown"):
        Manifest(str(state), "run-1")


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


def test_a_shared_folder_such_as_tmp_is_no_state_location(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(ManifestError, match=r"mode 1777.*shared folder.*choose a state_location of your own"):
        Manifest(str(shared), "run-1")
    Manifest(str(shared / "mine"), "run-1").write_once("snapshot", {"a": 1})  # a folder of one's own inside it
