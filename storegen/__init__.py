"""Writing RocketMQ stores for the demo, the tests and the benchmark (reput itself never writes records).

- `encoder`: `Message` objects to record bytes and full-size commit-log segments
- `sample`: the small deterministic sample store (`python -m storegen.sample OUT_DIR`, used by `make demo`)
- `synth`: large synthetic benchmark stores (`python -m bench`)

The broker and client rules these follow are transcribed here from RocketMQ's source on purpose, apart
from storage_format's readers, wherever a test compares what reput reads with what was written; shared
facts that are no such check (constants, segment names, offset message ids) come from storage_format.
"""
