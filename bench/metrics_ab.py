"""Metrics on and off in turns over one load, so that what watching the mirror costs is measured side by
side on the same machine in the same minutes: a Prometheus (Debian's, from `make install`) scraping
the exporter of the benchmark's state location every `scrape_s`, both running in the "on" windows and
both stopped (SIGSTOP: no scrape, no manifest read, no rule evaluated) in the "off" ones, the windows
`switch_s` long, starting with off. A record acknowledged within `margin_s` of a switch is counted in
neither (its copy straddles both)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stack"))
import local_prometheus  # noqa: E402


class MetricsInTurns(threading.Thread):
    def __init__(self, home: Path, state_location: str, run: str, *, port: int, exporter_port: int,
                 scrape_s: float = 5.0, switch_s: float = 30.0, margin_s: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.monitoring = local_prometheus.Monitoring(home, state_location, port=port, exporter_port=exporter_port,
                                                      scrape_s=scrape_s)
        self.run_name, self.switch_s, self.margin_s = run, switch_s, margin_s
        self.windows: list[tuple[float, float, bool]] = []  # (began, ended, metrics on)
        self.stopping = threading.Event()
        self.scraped_rounds: set[int] = set()  # the mirror's status rounds Prometheus held, read in the on windows

    def __enter__(self) -> MetricsInTurns:
        self.monitoring.start()
        self._signal(signal.SIGSTOP)
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(self.switch_s + 30)
        self._signal(signal.SIGCONT)
        self.monitoring.stop()

    def run(self) -> None:
        on, began = False, time.time()
        while not self.stopping.is_set():
            if time.time() - began >= self.switch_s:
                self.windows.append((began, time.time(), on))
                on, began = not on, time.time()
                self._signal(signal.SIGCONT if on else signal.SIGSTOP)
            elif on:  # what Prometheus holds, read as an operator's dashboard would (on windows only)
                self._read()
            self.stopping.wait(1.0)
        self.windows.append((began, time.time(), on))

    def _read(self) -> None:
        try:
            found = local_prometheus.query(self.monitoring.url, f'kmigrate_mirror_status_round{{run="{self.run_name}"}}')
        except OSError:
            return
        self.scraped_rounds.update(int(float(f["value"][1])) for f in found)

    def _signal(self, sig: signal.Signals) -> None:
        for pid in self.monitoring.pids().values():
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass

    def split(self, acked: list[tuple[int, int, float]]) -> dict[bool, list[tuple[int, int, float]]]:
        """The acknowledged records by the window they fell in: {True: metrics on, False: off}."""
        out: dict[bool, list[tuple[int, int, float]]] = {True: [], False: []}
        for record in acked:
            at = record[2]
            for began, ended, on in self.windows:
                if began + self.margin_s <= at < ended - self.margin_s:
                    out[on].append(record)
                    break
        return out
