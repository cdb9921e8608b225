"""The mirror's driver alone in a process of its own, its terms copied in that process (`copy_term_here`),
for tests that kill it (a driver that dies leaves its status as it was, not stopped):

    python -m tests.support.mirror_driver STATE RUN SOURCE_BOOTSTRAP TARGET_BOOTSTRAP TOPICS_PATTERN"""
from __future__ import annotations

import sys

from kmigrate.config import ClusterConfig
from kmigrate.manifest import Manifest
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec


def main(state: str, run: str, source: str, target: str, pattern: str) -> int:
    clusters = (ClusterConfig("source", {"bootstrap.servers": source}), ClusterConfig("target", {"bootstrap.servers": target}))
    spec = MirrorSpec(pattern, interval_s=0.5, verify_every_s=2.0, term_s=60.0)
    Mirror(Manifest(state, run), *clusters, spec, say=lambda line: print(line, flush=True)).run(max_seconds=600)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
