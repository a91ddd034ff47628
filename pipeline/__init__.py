"""The analytics job (`groupcoord analyze`, SPEC §6): PySpark tables from the coordinator's events (docs/EVENTS.md).

`tables` holds the logic as pure DataFrame functions, so the same code runs embedded (`local[*]`) and under
`spark-submit --master ...`; `io` reads and writes, `session` starts Spark, `analyze` is the entry point.
"""
