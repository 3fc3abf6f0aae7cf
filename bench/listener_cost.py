"""What turning one progress event into Python costs the driver: pyspark's bridge and ours.

Every query under ``spark_ckpt.install`` has its progress events delivered to the control
plane's listener, once per batch, on the driver. pyspark's bridge builds the Python event field
by field from the JVM's object (``QueryProgressEvent.fromJObject``); the control plane's
(:class:`spark_ckpt.spark.listener.JsonProgressBridge`) parses the event's JSON, one Py4J call.
This benchmark converts the *same* events both ways, inside one listener, alternating which goes
first, so both see the same events, JVM and load: a ``txn-cdc`` query over a Debezium-format log
(``maxChangesPerTrigger=--cap``, ``Trigger.availableNow``) into ``delta-2pc``, ``--runs`` times.

It also checks the two conversions agree (the progress's JSON, field for field) and reports the
driver's process CPU (the JVM's, where the Py4J calls are served) over each conversion.

Prints one JSON line: per conversion the median and p90 milliseconds of wall time per event and
the JVM's CPU over all its conversions (the whole process's: the query runs meanwhile, so both
include some of its work), and the ratio of the wall-time medians.
Run: ``scripts/bench.sh listener_cost``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryProgressEvent,
    StreamingQueryListener,
)

import spark_ckpt
from spark_ckpt.testing.debezium_log import random_log, write_log

CONVERSIONS = ("pyspark_fromJObject", "spark_ckpt_json")


def _jvm_cpu_ms(jvm_pid: int) -> float:
    """The JVM process's user plus system CPU so far, in milliseconds (Linux ``/proc``)."""
    fields = Path(f"/proc/{jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks * 1000 / 100  # USER_HZ is 100 on Linux


class _TimingBridge(JStreamingQueryListener):
    """Converts each progress event both ways and notes the cost (listener bus, each batch)."""

    def __init__(self, listener: StreamingQueryListener, jvm_pid: int) -> None:
        super().__init__(listener)
        self.jvm_pid = jvm_pid
        self.samples: dict[str, list[tuple[float, float]]] = {c: [] for c in CONVERSIONS}
        self.mismatches: list[str] = []
        self._count = 0

    def _timed(self, name: str, convert: Any) -> QueryProgressEvent:
        cpu, wall = _jvm_cpu_ms(self.jvm_pid), time.perf_counter()
        event: QueryProgressEvent = convert()
        self.samples[name].append(
            ((time.perf_counter() - wall) * 1000, _jvm_cpu_ms(self.jvm_pid) - cpu)
        )
        return event

    def onQueryProgress(self, jevent: Any) -> None:
        self._count += 1
        convert = {
            "pyspark_fromJObject": lambda: QueryProgressEvent.fromJObject(jevent),
            "spark_ckpt_json": lambda: QueryProgressEvent.fromJson(
                {"progress": json.loads(jevent.progress().json())}
            ),
        }
        order = CONVERSIONS if self._count % 2 else tuple(reversed(CONVERSIONS))
        events = {name: self._timed(name, convert[name]) for name in order}
        theirs, ours = (json.loads(events[name].progress.json) for name in CONVERSIONS)
        if theirs != ours:
            self.mismatches.append(f"batch {ours.get('batchId')}: {theirs} != {ours}")


class _Listener(StreamingQueryListener):
    """A listener whose JVM side is :class:`_TimingBridge` (driver)."""

    def __init__(self, jvm: Any, jvm_pid: int) -> None:
        self.bridge = _TimingBridge(self, jvm_pid)
        self._wrapper = jvm.PythonStreamingQueryListenerWrapper(self.bridge)

    @property
    def _jlistener(self) -> Any:
        return self._wrapper

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=60)
    parser.add_argument("--cap", type=int, default=10, help="maxChangesPerTrigger")
    args = parser.parse_args()
    spark = spark_ckpt.local_session("listener-cost")
    control = spark_ckpt.install(spark)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm_pid = int(jvm.ProcessHandle.current().pid())
    listener = _Listener(jvm, jvm_pid)
    spark.streams.addListener(listener)
    events = 0  # the progress events the queries reported, all of which the listener must see
    with tempfile.TemporaryDirectory(prefix="listener-cost-") as scratch:
        log = Path(scratch, "log")
        records, _ = random_log(random.Random(7), args.transactions)
        write_log(str(log), records, [len(records) // 3, 2 * len(records) // 3])
        for index in range(args.runs):
            work = Path(scratch, f"run-{index}")
            query = (
                spark.readStream.format("txn-cdc")
                .option("connector", "debezium-json")
                .option("maxChangesPerTrigger", str(args.cap))
                .load(str(log))
                .writeStream.format("delta-2pc")
                .option("path", str(work / "table"))
                .option("checkpointLocation", str(work / "ckpt"))
                .trigger(availableNow=True)
                .start()
            )
            if not control.await_termination(query, 600):
                query.stop()
                raise RuntimeError("the query did not finish within 600 s")
            events += len(query.recentProgress)
    # The last events reach the listener after the query ended: wait for the bus to drain.
    deadline = time.monotonic() + 30
    while len(listener.bridge.samples[CONVERSIONS[0]]) < events and time.monotonic() < deadline:
        time.sleep(0.1)
    if len(listener.bridge.samples[CONVERSIONS[0]]) < events:
        raise SystemExit(f"the listener had fewer than the queries' {events} events after 30 s")
    spark.stop()
    samples = listener.bridge.samples
    if listener.bridge.mismatches:
        raise SystemExit(f"the conversions disagree: {listener.bridge.mismatches[:2]}")
    result: dict[str, Any] = {
        "bench": "listener_cost",
        "events": len(samples[CONVERSIONS[0]]),
        "runs": args.runs,
    }
    for name in CONVERSIONS:
        result[f"{name}_wall_ms"] = _stats([wall for wall, _ in samples[name]])
        # Summed: the JVM's clock ticks every 10 ms, longer than one JSON conversion.
        result[f"{name}_jvm_cpu_ms_total"] = round(sum(cpu for _, cpu in samples[name]))
    result["wall_ratio_pyspark_to_json"] = round(
        result[f"{CONVERSIONS[0]}_wall_ms"]["median"]
        / result[f"{CONVERSIONS[1]}_wall_ms"]["median"],
        1,
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
