"""The compiled (numba) kernels, their decorator and cache, and warming them.

`jit` (the decorator and numba's cache locator) imports nothing else of the package; `warm` runs every
kernel once; shared types the kernels produce live outside this package (`split_rows`, `index_keys`), so the
reference path and recovery never import a kernel module. Each kernel keeps a pure numpy (or Python)
reference beside it, tested equal (tests/test_layout.py checks that this table names every kernel `warm`
loads and that each reference and test exists):

| kernel | reference | tested by |
|---|---|---|
| `split_kernel.decode_kernel` | `storage_format.commitlog.decode_buffer` | `tests/test_split_kernel.py::test_kernel_equals_reference_on_golden` |
| `row_groups.group_rows` | `jobs.pipeline.scan.cq_rows.cq_table` | `tests/test_split_kernel.py::test_kernel_equals_reference_on_generated` |
| `index_chain.newest_by_hash` | `storage_format.index_build.newest_positions_numpy` | `tests/test_index_file.py::test_compiled_entries_equal_numpy_reference` |
| `index_chain.entry_bytes` | `storage_format.index_build.entry_bytes_numpy` | `tests/test_index_file.py::test_compiled_entries_equal_numpy_reference` |
| `index_chain.append_chain` | `storage_format.index_build.append_chain_numpy` | `tests/test_index_file.py::test_compiled_append_chain_equals_numpy_reference` |
| `lmq_kernel.multi_dispatch_items` | `storage_format.multi_dispatch.lmq_entries` | `tests/test_split_kernel.py::test_kernel_equals_reference_on_generated_lmq` |
| `kernel_bytes.java_hash` | `storage_format.java_hash.java_hash` | `tests/test_split_kernel.py::test_kernel_hash_is_javas_string_hash` |
| `crc_kernel.crc32` | `zlib.crc32` | `tests/test_crc_kernel.py::test_kernel_crc_equals_zlib` |
| `layout_kernel.map_offsets` | `storage_format.commitlog_layout.map_offsets_reference` | `tests/test_workdir.py::test_offset_map_kernel_equals_reference` |
| `layout_kernel.crc32_clmul` | `zlib.crc32` | `tests/test_convert_crc.py::test_the_carry_less_crc_equals_zlib` |
| `record_search.find_record` | `storage_format.commitlog.find_first_record` | `tests/test_record_search.py::test_kernel_search_equals_reference_on_golden` |
| `record_fields.store_timestamps_at` | `storage_format.record_columns.RecordColumns` | `tests/test_record_fields.py::test_kernel_timestamps_equal_reference_on_golden` |

The other helpers of `kernel_bytes` (byte reads, the property scan, topic checks), of `lmq_kernel` (items,
offsets, queueIds of multi-dispatch names) and `crc_kernel`'s record check are inlined into decode_kernel and
tested through it (`tests/test_crc_kernel.py` too); so are split_kernel's own (its queue lookup `_find_queue`,
the batched `_resolve` of multi-dispatch items, `_queues_out`'s per-queue statistics:
`tests/test_split_kernel.py::test_kernel_tells_queues_apart_by_every_byte` besides the golden and generated
comparisons).
"""
