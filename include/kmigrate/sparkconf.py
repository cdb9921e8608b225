"""Spark settings for the kmigrate jobs that only take effect when Spark starts, so they go on the
launch (spark-submit's --conf, a Spark Connect server's properties file), not in the job's code:
the DAG's operators, stack/spark_cluster.py's Connect server, the benches and the tests pass them.
No imports beyond the standard library: stack/spark_cluster.py runs outside the project's venv."""
from __future__ import annotations

# The driver JVM's options; under local[N] that JVM also runs the executor. Two costs of its own
# that compete with the copy for the machine's cores (measured with JFR, spark-submit on local[2]):
# - every finished task's result is serialized into a 1 MiB buffer, which under G1's 1 MiB
#   regions (any heap under 2 GiB) is a humongous object, and each one started a young collection
#   and a concurrent cycle: 13 of them in one 12-task copy. 4 MiB regions make it an ordinary one;
# - every Spark job makes the closure cleaner parse whole class files (RDD's among them) with ASM,
#   and C2 then compiles ASM's 62 kB ClassReader.readCode: 0.7-1.4 s of a core at the copy job's
#   start. Above this node limit C2 gives the method up, and it runs as C1 compiled it.
# Side by side (bench workload, 12 partitions), the JVM's CPU during a copy fell from 0.62-1.96
# CPU-s (median 1.38, 15 copies) to 0.43-0.95 (median 0.61, 11 copies); either option alone left
# it at a median of 1.26 (5) and 1.09 (10).
DRIVER_JAVA_OPTIONS = ("-XX:G1HeapRegionSize=4m -XX:CompileCommand=quiet "
                       "-XX:CompileCommand=MaxNodeLimit,org.apache.xbean.asm9.ClassReader::readCode,1000")

LAUNCH_CONF = {"spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS}


def submit_args(conf: dict[str, str] | None = None) -> list[str]:
    """`--conf key=value` arguments for spark-submit: LAUNCH_CONF, then `conf`."""
    return [arg for key, value in {**LAUNCH_CONF, **(conf or {})}.items() for arg in ("--conf", f"{key}={value}")]
