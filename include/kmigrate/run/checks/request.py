"""What a run was asked to do (its params at the first trigger), kept in its manifest: the same
run name triggered again with other params is refused before anything is done, since its manifest
already records a snapshot, plans and copies made for the first request.

The record keeps no secret in clear: each `connector_overrides` value (often a database password)
and the password of any URL param (an fsspec `state_location` like sftp://user:pw@host/...) are
kept as a salted, stretched digest (PBKDF2-SHA256, a random salt per run), so that the same
params triggered again still compare equal and another value is still told apart; a conflict
names the differing override key and says `<value differs>`, never a value."""
from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from kmigrate.errors import RunConflict
from kmigrate.manifest import Manifest, ManifestError, Part

# how a run executes, not what it does: these may change between tries of one run, and are never
# recorded. spark_remote (a Spark Connect URL, which may carry a token) was the param before
# spark_connect_conn_id: still left out, so that a run triggered again with its old conf compares
EXECUTION_PARAMS = frozenset({"dry_run", "spark_connect_conn_id", "spark_remote", "spark_parallelism"})
# params whose every value is a secret's place: kept as digests only
OVERRIDES = "connector_overrides"
_ITERATIONS = 20_000  # a guess at a weak password costs 20,000 hashes; a check, a few ms a value
_DIFFERS = "<value differs>"


def _digest(salt: str, *parts: Any) -> str:
    text = "\0".join(json.dumps(p, sort_keys=True, default=str) for p in parts)
    return "pbkdf2-sha256:" + hashlib.pbkdf2_hmac("sha256", text.encode(), salt.encode(), _ITERATIONS).hex()[:32]


def _masked_url(name: str, value: str, salt: str) -> str:
    """`value` with the password of a URL's user part replaced by its digest."""
    if "://" not in value or "@" not in value:
        return value
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password:
        return value
    userinfo, host = parts.netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:{_digest(salt, name, password)}@{host}").geturl()


def _what(params: Mapping[str, Any], salt: str) -> dict[str, Any]:
    """The params that say what the run does, as recorded: secrets as digests (see above)."""
    out = json.loads(json.dumps({k: v for k, v in params.items() if k not in EXECUTION_PARAMS}, default=str))
    overrides = out.get(OVERRIDES)
    if OVERRIDES in out and not overrides:
        out[OVERRIDES] = {}  # none given, empty or null: the same request
    elif isinstance(overrides, dict):
        out[OVERRIDES] = {name: ({key: _digest(salt, name, key, value) for key, value in config.items()}
                                 if isinstance(config, dict) else _digest(salt, name, config))
                          for name, config in overrides.items()}
    elif OVERRIDES in out:
        out[OVERRIDES] = _digest(salt, overrides)
    return {k: _masked_url(k, v, salt) if isinstance(v, str) else v for k, v in out.items()}


def _override_changes(before: Any, wanted: Any) -> list[str]:
    """Which connector's override keys differ, never their values."""
    if not isinstance(before, dict) or not isinstance(wanted, dict):
        return [f"{OVERRIDES}: {_DIFFERS}"]
    out = []
    for name in sorted(set(before) | set(wanted)):
        was, now = before.get(name), wanted.get(name)
        if not isinstance(was, dict) or not isinstance(now, dict):
            if was != now:
                out.append(f"{OVERRIDES}[{name!r}]: {'none' if was is None else 'set'} then, "
                           f"{'none' if now is None else 'set'} now")
            continue
        for key in sorted(set(was) | set(now)):
            if key not in was or key not in now:
                out.append(f"{OVERRIDES}[{name!r}][{key!r}]: {'set' if key in was else 'not set'} then, "
                           f"{'set' if key in now else 'not set'} now")
            elif was[key] != now[key]:
                out.append(f"{OVERRIDES}[{name!r}][{key!r}]: {_DIFFERS}")
    return out


def check_request(manifest: Manifest, params: Mapping[str, Any]) -> bool:
    """Refuse `params` when the run's recorded request differs (read-only). Returns whether the
    run has a recorded request (it was started before; the same params, then)."""
    recorded = manifest.read(Part.PARAMS)
    if recorded is None:
        return False
    if not isinstance(recorded.get("params"), dict) or not isinstance(recorded.get("salt", ""), str):
        raise ManifestError(
            f"part {Part.PARAMS!r} of the run manifest at {manifest.location} is not a recorded request (it holds "
            f"{', '.join(sorted(map(str, recorded))) or 'no key'}; a request is {{\"params\": {{...}}, \"salt\": "
            "\"...\"}): something else wrote it. Restore it from a backup, or trigger a new run_name; nothing was done")
    salt = recorded.get("salt", "")
    wanted = _what(params, salt)
    # a request recorded before secrets were kept as digests holds them in clear: compared as digests
    before = recorded["params"] if "salt" in recorded else _what(recorded["params"], salt)
    differ = sorted(k for k in set(wanted) | set(before) if wanted.get(k) != before.get(k))
    if differ:
        detail = "; ".join(("; ".join(_override_changes(before.get(k) or {}, wanted.get(k) or {}))
                            or f"{k}: {_DIFFERS}") if k == OVERRIDES
                           else f"{k}: {before.get(k)!r} then, {wanted.get(k)!r} now" for k in differ)
        raise RunConflict(
            f"run {manifest.run_id!r} was started with other params ({detail}). A run name names one migration: "
            f"trigger it again with the params it was started with to continue or confirm it, or choose a new "
            f"run_name for a new migration. Nothing was done")
    return True


def record_request(manifest: Manifest, params: Mapping[str, Any]) -> dict[str, Any]:
    """The run's request, recorded by its first non-dry trigger (a re-run keeps it)."""
    check_request(manifest, params)
    salt = secrets.token_hex(16)
    return manifest.get_or_create(Part.PARAMS, lambda: {"params": _what(params, salt), "salt": salt})
