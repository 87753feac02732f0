"""`kdelay.spark.session()`: the one way kdelay makes a local SparkSession (scripts, the
`kdelay forecast` / `spark-verify` commands, the benchmarks and the tests all use it).

What it sets, and why:
- PYSPARK_PYTHON = this interpreter, before the JVM starts: local workers are started from
  it, and otherwise run the `python3` on PATH, which a script run as `.venv/bin/python
  app.py` without the venv activated cannot count on to import kdelay. (pyspark's launch
  script also uses it to find Spark.) SPARK_LOCAL_IP=127.0.0.1 unless set: no warning
  about a hostname that resolves to a loopback address, no listening on other interfaces.
- quiet logs: a log4j2 configuration (log4j2-quiet.properties, beside this module) for the
  JVM's start, which otherwise logs a "default log4j profile" banner, a "Setting default
  log level" notice and a native-hadoop WARN line before any level can be set; then log
  level ERROR, so WARN lines (a stream that stops, a data source replaced) stay out.
  What still reaches stderr: errors, and one "WARNING: Using incubator modules" line the
  JVM itself prints at start.
- no UI, no console progress bars, UTC session time (kdelay's times are UTC epoch ms),
  shuffle partitions sized for local cores, Python filter pushdown on, and the `kdelay`
  data source registered.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from ..errors import InvalidConfigError
from ..validation import as_int
from . import PUSHDOWN_CONF, register

QUIET_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "log4j2-quiet.properties")


def session(app_name: str = "kdelay", *, cores: int | None = None,
            quiet: bool = True) -> SparkSession:
    """A local SparkSession ready for kdelay (see the module docstring): `cores` local
    cores (default: all), quiet logs unless `quiet=False` (Spark's own logging, level
    WARN). While a session is active, that one is returned with the data source registered
    (and so pushdown on), its other settings left as they are: its workers' Python and its
    JVM were fixed when it started."""
    if cores is not None:  # refused here, not by the JVM once started ("local[0]")
        cores = as_int(cores, "cores", lo=1, hi=1 << 16, error=InvalidConfigError)
    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    n = cores if cores is not None else os.cpu_count() or 1
    builder = (SparkSession.builder.master(f"local[{n}]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", str(max(2, 2 * n)))
               .config(PUSHDOWN_CONF, "true"))
    if quiet:
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile={QUIET_LOG4J}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    register(spark)
    return spark
