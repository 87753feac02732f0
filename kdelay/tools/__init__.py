"""The `kdelay` command line and what it is built from: one module per command (dump_log,
dump_index, verify + verify_index + verify_batches + verify_remote, stats, rebuild_index,
compact, demo + queue_demo, serve), the shared scanning and report types (scanning), output
formatting and the progress bar. The inspection commands (dump-log, dump-index, verify,
stats) only read and take no lock; rebuild-index and compact rewrite a log's files under its
lock, demo and queue-demo write logs of their own, and serve runs a broker over a root of
logs."""
