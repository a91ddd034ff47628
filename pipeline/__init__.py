"""The analytics job `groupcoord analyze` (docs/ANALYZE.md): PySpark tables from the coordinator's events.

`tables` holds the logic as pure DataFrame functions, so the same code runs embedded (`local[*]`) and under
`spark-submit --master ...`; `io` reads and writes, `session` starts Spark, `analyze` is the entry point.
"""
