"""`python -m kmigrate.claims show|release`: the runs' claims on a target cluster shown, or a run's
released by hand (an abandoned run's, named in the TopicsHeld message).

The target's client settings come from a file (`--config-file`, readable by its owner only) or the
environment, never a secret on the command line, where `ps` shows it to every local user: a
`--config` item naming a password, secret, token, JAAS configuration or private key is refused.
Every error ends in one line naming the cause and the way out, and a non-zero exit."""
from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException

from kmigrate.claims.log import claim_log, close_all
from kmigrate.claims.runs import release_topics
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError

ENV = "KMIGRATE_CLAIMS_CONFIG"
# keys whose values are credentials (sasl.password, ssl.key.password, ssl.keystore.password,
# sasl.jaas.config, ssl.key.pem, sasl.oauthbearer.client.secret, ...); a file's location is no secret
_SECRET = re.compile(r"password|secret|jaas|token|credential|private|oauthbearer\.config|(^|[._])key([._]|$)")

EPILOG = f"""client settings (security.protocol, sasl.*, ssl.*), later ones winning:
  --config-file PATH  KEY=VALUE lines (# comments) or one JSON object; readable and writable
                      by its owner only (chmod 600 PATH), or it is refused
  environment         {ENV}='{{"sasl.password": "..."}}' (a JSON object), and
                      {ENV}_<KEY>, the key upper-cased with _ for . :
                      {ENV}_SASL_PASSWORD=... sets sasl.password
  --config KEY=VALUE  a setting that is no secret (security.protocol=SASL_SSL); a password,
                      secret, token, JAAS configuration or key on the command line is refused

release: a run's claim is its name and its deployment (the state location of its
manifest, shown by `show`). Without --force only a claim of no deployment (written before claims
named one) is released; --force releases the run's claims of every deployment, or with
--deployment the one of that deployment."""


def is_secret(key: str) -> bool:
    """Whether a client setting's value is a credential (a file's location is not)."""
    key = key.lower()
    return bool(_SECRET.search(key)) and not key.endswith(".location")


def _item(item: str) -> tuple[str, str]:
    """A --config item: KEY=VALUE of no secret (argparse's type)."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{item[:60]!r} is not KEY=VALUE (a client setting, e.g. "
                                         "security.protocol=SASL_SSL)")
    if is_secret(key):
        raise argparse.ArgumentTypeError(
            f"{key} is a secret: on the command line every local user sees it (ps). Put it in a file given "
            f"with --config-file PATH (chmod 600 PATH) or in the environment ({ENV}_{key.upper().replace('.', '_')})")
    return key, value


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ConfigError(f"{where}: a client setting's value is text, a number or true/false, not {type(value).__name__}")


def _json_settings(text: str, where: str) -> dict[str, str]:
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not a JSON object of client settings ({exc})") from exc
    if not isinstance(settings, dict):
        raise ConfigError(f"{where} is not a JSON object of client settings")
    return {str(key): _text(value, f"{where}, {key}") for key, value in settings.items()}


def read_config_file(path: str) -> dict[str, str]:
    """The client settings of a file of KEY=VALUE lines or one JSON object; ConfigError when it is
    readable or writable by others than its owner, unreadable, or of another shape."""
    try:
        mode = os.stat(path).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO) & ~(stat.S_IXGRP | stat.S_IXOTH):
            raise ConfigError(f"--config-file {path} is readable or writable by group or others (mode "
                              f"{stat.S_IMODE(mode):04o}) and holds the target's credentials: `chmod 600 {path}`, "
                              "then retry")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config-file {path} cannot be read ({exc}); give a readable file of client "
                          "settings") from exc
    if text.lstrip().startswith("{"):
        return _json_settings(text, f"--config-file {path}")
    settings = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config-file {path}, line {number}: not KEY=VALUE; write one setting a line "
                              "(or one JSON object)")
        settings[key.strip()] = value.strip()
    return settings


def env_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The client settings of the environment: KMIGRATE_CLAIMS_CONFIG (a JSON object), then each
    KMIGRATE_CLAIMS_CONFIG_<KEY> (KEY lower-cased, _ for .)."""
    settings = _json_settings(environ[ENV], f"the environment variable {ENV}") if environ.get(ENV) else {}
    settings.update({name[len(ENV) + 1:].lower().replace("_", "."): value for name, value in sorted(environ.items())
                     if name.startswith(f"{ENV}_") and len(name) > len(ENV) + 1})
    return settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kmigrate.claims", epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Show or release the runs' claims on a target cluster.")
    parser.add_argument("action", choices=("show", "release"))
    parser.add_argument("run", nargs="?", help="the run whose topics are released")
    parser.add_argument("--bootstrap-servers", required=True, help="the target cluster")
    parser.add_argument("--config-file", metavar="PATH", help="client settings (see below)")
    parser.add_argument("--config", action="append", default=[], type=_item, metavar="KEY=VALUE",
                        help="a client setting that is no secret, repeatable")
    parser.add_argument("--force", action="store_true",
                        help="release the run's claims of another deployment (every one, or --deployment's)")
    parser.add_argument("--deployment", help="with --force: the deployment whose claim of the run is released")
    return parser


def _show(target: ClusterConfig) -> int:
    claims = claim_log(target).current()
    runs = sorted(claims.runs.values(), key=lambda claim: (claim["run"], claim["deployment"]))
    print(json.dumps({"runs": runs, "leases": claims.parts, "sources": claims.sources}, indent=1, sort_keys=True))
    return 0


def _release(target: ClusterConfig, run: str, force: bool, deployment: str | None) -> int:
    if force:
        released = release_topics(target, run, deployment=deployment, force=True)
    else:
        released = release_topics(target, run)  # a claim of no deployment
    if released:
        print(f"run {run!r}: its topics are released" + (f" (deployment {deployment!r})" if deployment else ""))
        return 0
    others = sorted(claim["deployment"] for claim in claim_log(target).current().runs.values()
                    if claim["run"] == run and claim["deployment"] != (deployment or ""))
    if others and not force:
        print(f"run {run!r} holds no claim of no deployment; its claims are of deployment "
              f"{', '.join(map(repr, others))}: release them with --force (and --deployment DEPLOYMENT for one)",
              file=sys.stderr)
        return 1
    print(f"run {run!r}: it held no topics" + (f" (deployment {deployment!r})" if deployment else ""))
    return 0


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The CLI (argv: the arguments after the program; environ: os.environ by default)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.action == "release" and not args.run:
        parser.error("release needs the run's name")
    if args.action == "show" and (args.run or args.force or args.deployment is not None):
        parser.error("show takes no run, --force or --deployment")
    if args.deployment is not None and not args.force:
        parser.error("--deployment names another deployment's claim: releasing it needs --force")
    try:
        settings = read_config_file(args.config_file) if args.config_file else {}
        settings.update(env_settings(os.environ if environ is None else environ))
        settings.update(dict(args.config))
        settings.pop("bootstrap.servers", None)  # the command line's --bootstrap-servers
        target = ClusterConfig.from_bootstrap("target", args.bootstrap_servers, **settings)
        if args.action == "show":
            return _show(target)
        return _release(target, args.run, args.force, args.deployment)
    except (KmigrateError, KafkaException, OSError, ValueError) as exc:
        print(f"python -m kmigrate.claims {args.action}: {exc}", file=sys.stderr)
        return 1
    finally:
        close_all()
