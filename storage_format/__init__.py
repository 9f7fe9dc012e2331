"""Byte-level RocketMQ store formats: pure Python + numpy/pyarrow, no Spark.

One module per artifact: `commitlog` (records), `encoder` (writes records/segments),
`properties`, `java_hash`, `consume_queue`, `index_file`, `checkpoint`, `markers`,
`settings` (broker .properties), `msg_id`, `recovery` (pure recovery planning).
"""
