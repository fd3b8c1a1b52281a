"""RecordBatches -> TFRecord-framed tf.Examples, a batch at a time in numpy.

tfx-bsl's ``RecordBatchToExamplesEncoder`` builds one ``tf.Example`` proto per row and
serializes it, and TensorFlow's ``TFRecordWriter`` then frames and compresses one record
per Python call. On a Transform's output (many rows of a few single-valued features) those
two were a third of the job's CPU (figures in benchmarks/). :func:`encode_framed` writes the
same wire format for a whole batch with array operations: every row's bytes are laid out as
a row of fixed-width fields (a varint is up to ten bytes, a list up to its batch's longest)
with a mask of the bytes each row uses, and one boolean selection packs them. The records
come out already framed as TFRecords (length, masked CRC32C of the length, the record, its
masked CRC32C), so the writer only compresses them.

It takes what tfx-bsl's encoder takes where that is cheap to lay out: columns of
``list``/``large_list`` of int64, float32 or binary, with no null values inside a list (a
null list is a feature with no kind set, as tfx-bsl writes it). Any other batch, and one
whose rows differ so much in length that the padded layout would be many times the
records' bytes, is encoded by tfx-bsl and framed here: the bytes differ only in the order
of the features, which a proto map does not fix (tfx-bsl's order varies from row to row).

Example::

    framed = encode_framed(record_batch)   # FramedRecords(data, count, payload_bytes)
    gzip_stream.write(compressor.compress(framed.data))
"""

from __future__ import annotations

from typing import Any, NamedTuple

import google_crc32c
import numpy as np
import pyarrow as pa

__all__ = ["FramedRecords", "encode_framed", "frame_records"]

# The padded layout may take this many times the records' bytes (plus a constant per
# row) before a batch goes to tfx-bsl instead: past that the layout costs more than it saves.
_MAX_PADDING = 4
_PADDING_SLACK = 64

# The padded layout of a batch is kept to about this many bytes (a feature's fields take a
# few dozen bytes a row): a wide batch is laid out a slice of rows at a time.
_LAYOUT_BYTES = 64 << 20
_BYTES_PER_FEATURE = 64
_MIN_SLICE_ROWS = 64

# Wire-format tags (field number << 3 | wire type 2, length-delimited).
_TAG_1, _TAG_2, _TAG_3 = 0x0A, 0x12, 0x1A
# tf.train.Feature's field per Arrow value type: bytes_list = 1, float_list = 2, int64_list = 3.
_KIND_TAG = {"binary": _TAG_1, "float": _TAG_2, "int64": _TAG_3}

# uint64 values at or above these need 2, 3, ... 10 varint bytes.
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


class FramedRecords(NamedTuple):
    """``count`` TFRecord-framed records in ``data`` (a buffer), ``payload_bytes`` the
    records' own bytes (without the framing)."""

    data: Any
    count: int
    payload_bytes: int


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
    return table.astype(np.uint32)


_CRC32C_TABLE = _crc_table()


def _masked(crc: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC: rotated right by 15 bits plus a constant (mod 2**32)."""
    crc = crc.astype(np.uint64)
    rotated = ((crc >> np.uint64(15)) | (crc << np.uint64(17))) & np.uint64(0xFFFFFFFF)
    return ((rotated + np.uint64(0xA282EAD8)) & np.uint64(0xFFFFFFFF)).astype("<u4")


def _length_crcs(lengths_le: np.ndarray) -> np.ndarray:
    """CRC32C of each row of an (n, 8) array of bytes, by table, all rows at once: a call
    of google-crc32c per 8-byte header would cost more than the whole row of steps."""
    crc = np.full(len(lengths_le), 0xFFFFFFFF, dtype=np.uint32)
    for column in range(lengths_le.shape[1]):
        index = (crc ^ lengths_le[:, column]) & np.uint32(0xFF)
        crc = _CRC32C_TABLE[index] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def _header(record: np.ndarray) -> np.ndarray:
    """Each record's TFRecord header: its length (8 bytes, little-endian) and the masked
    CRC32C of those 8 bytes, (n, 12) bytes."""
    length = record.astype("<u8").view(np.uint8).reshape(-1, 8)
    crc = _masked(_length_crcs(length)).view(np.uint8).reshape(-1, 4)
    return np.concatenate([length, crc], axis=1)


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's varint (values as uint64: a negative int64 takes ten)."""
    values = values.astype(np.uint64, copy=False)
    sizes = np.ones(len(values), dtype=np.int64)
    if len(values):
        top = values.max()
        for limit in _VARINT_LIMITS:  # one pass per byte the largest value needs
            if top < limit:
                break
            sizes += values >= limit
    return sizes


def _varint_field(values: np.ndarray, sizes: np.ndarray | None = None):
    """The varints of ``values`` (uint64 or non-negative int64) as a field: ((n, w) bytes,
    (n, w) mask), ``w`` the longest of them; one row of bytes where all values are equal."""
    values = values.astype(np.uint64, copy=False)
    if len(values) and values.min() == values.max():
        return np.frombuffer(_varint_bytes(int(values[0])), dtype=np.uint8)[None, :], None
    if sizes is None:
        sizes = _varint_sizes(values)
    width = int(sizes.max()) if len(sizes) else 1
    if width == 1:
        return values.astype(np.uint8)[:, None], None
    step = np.arange(width)
    groups = (values[:, None] >> (step.astype(np.uint64) * np.uint64(7))) & np.uint64(0x7F)
    more = step[None, :] < (sizes[:, None] - 1)
    data = (groups | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
    return data, step[None, :] < sizes[:, None]


def _const(data: bytes, where: np.ndarray | None = None):
    """A field of the same bytes in every row (where ``where``, if given)."""
    return _masked_field((np.frombuffer(data, dtype=np.uint8)[None, :], None), where)


def _masked_field(field, where: np.ndarray | None):
    """``field`` in the rows of ``where`` only (None: all rows)."""
    data, mask = field
    if where is None:
        return field
    if mask is None:
        return data, np.broadcast_to(where[:, None], (len(where), data.shape[1]))
    return data, mask & where[:, None]


class _Column(NamedTuple):
    kind: str  # "int64", "float" or "binary"
    present: np.ndarray | None  # rows whose list is not null; None: all of them
    counts: np.ndarray  # values per row (0 for a null list)
    offsets: np.ndarray  # counts' running sum, from 0
    values: Any  # numpy values (int64, float32), or a binary column's (bounds, heap)


def _column(array) -> _Column | None:
    """The parts of a list column this encoder lays out, or None for any other column."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not pa.types.is_list(array.type) and not pa.types.is_large_list(array.type):
        return None
    value_type = array.type.value_type
    if pa.types.is_int64(value_type):
        kind = "int64"
    elif pa.types.is_float32(value_type):
        kind = "float"
    elif pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        kind = "binary"
    else:
        return None
    flat = array.flatten()  # drops the values behind null lists and before a slice
    if flat.null_count:
        return None
    raw = np.asarray(array.offsets, dtype=np.int64)
    counts = np.diff(raw)
    present = None
    if array.null_count:
        present = ~np.asarray(array.is_null(), dtype=bool)
        counts = np.where(present, counts, 0)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = _strings(flat) if kind == "binary" else np.asarray(flat)
    return _Column(kind, present, counts, offsets, values)


def _strings(values) -> tuple[np.ndarray, np.ndarray]:
    """A BinaryArray's value bounds (n + 1, into the heap) and its heap of bytes."""
    offset_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    bounds = np.frombuffer(values.buffers()[1], dtype=offset_type)
    bounds = bounds[values.offset : values.offset + len(values) + 1].astype(np.int64)
    heap = values.buffers()[2]
    return bounds, np.frombuffer(heap, dtype=np.uint8) if heap is not None else None


def _per_row(item_sizes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    running = np.zeros(len(item_sizes) + 1, dtype=np.int64)
    np.cumsum(item_sizes, out=running[1:])
    return running[offsets[1:]] - running[offsets[:-1]]


def _rows_of(items_data, items_mask, column: _Column, n: int):
    """Item fields (one row per value) -> row fields: a row's items side by side, padded
    to the longest row's count."""
    longest = int(column.counts.max()) if n else 0
    width = items_data.shape[1]
    if longest == 0:
        return None
    if bool((column.counts == longest).all()):
        if items_data.shape[0] == 1 and items_mask is None:  # the same in every row
            return np.tile(items_data, (1, longest)), None
        data = np.broadcast_to(items_data, (n * longest, width)).reshape(n, longest * width)
        mask = None if items_mask is None else items_mask.reshape(n, longest * width)
        return data, mask
    total = int(column.offsets[-1])
    items_data = np.broadcast_to(items_data, (total, width))
    rows = np.repeat(np.arange(n), column.counts)
    slot = np.arange(total) - np.repeat(column.offsets[:-1], column.counts)
    data = np.zeros((n, longest, width), dtype=np.uint8)
    data[rows, slot] = items_data
    mask = np.zeros((n, longest, width), dtype=bool)
    mask[rows, slot] = True if items_mask is None else items_mask
    return data.reshape(n, longest * width), mask.reshape(n, longest * width)


def _binary_items(values) -> tuple[np.ndarray, Any, Any]:
    """Per string: its length, and its (tag, varint length, bytes) item field."""
    bounds, heap = values
    lengths = np.diff(bounds)
    longest = int(lengths.max()) if len(lengths) else 0
    text = np.zeros((len(lengths), longest), dtype=np.uint8)
    if longest:
        item = np.repeat(np.arange(len(lengths)), lengths)
        at = np.arange(int(lengths.sum())) - np.repeat(bounds[:-1] - bounds[0], lengths)
        text[item, at] = heap[bounds[0] : bounds[-1]]
    text_mask = np.arange(longest)[None, :] < lengths[:, None]
    tag = np.full((len(lengths), 1), _TAG_1, dtype=np.uint8)
    size_data, size_mask = _varint_field(lengths)
    size_data = np.broadcast_to(size_data, (len(lengths), size_data.shape[1]))
    if size_mask is None:
        size_mask = np.ones(size_data.shape, dtype=bool)
    data = np.concatenate([tag, size_data, text], axis=1)
    mask = np.concatenate([np.ones((len(lengths), 1), dtype=bool), size_mask, text_mask], axis=1)
    return lengths, data, mask


def _list_body(column: _Column, n: int):
    """The fields of each row's list message (after its tag and length), and its length."""
    has_values = None if column.counts.min() > 0 else column.counts > 0
    if column.kind == "float":
        sizes = column.counts * 4
        items = np.ascontiguousarray(column.values, dtype="<f4").view(np.uint8)
        values = _rows_of(items.reshape(-1, 4), None, column, n)
    elif column.kind == "int64":
        raw = column.values.astype(np.int64, copy=False).view(np.uint64)
        value_sizes = _varint_sizes(raw)
        sizes = _per_row(value_sizes, column.offsets)
        values = _rows_of(*_varint_field(raw, value_sizes), column, n)
    else:
        lengths, data, mask = _binary_items(column.values)
        item_sizes = 1 + _varint_sizes(lengths.astype(np.uint64)) + lengths
        body = _per_row(item_sizes, column.offsets)
        return [f for f in [_rows_of(data, mask, column, n)] if f is not None], body
    # A packed repeated field (tag 1); absent from an empty list.
    fields = [
        _const(bytes([_TAG_1]), has_values),
        _masked_field(_varint_field(sizes), has_values),
    ]
    if values is not None:
        fields.append(values)
    body = 1 + _varint_sizes(sizes.astype(np.uint64)) + sizes
    if has_values is not None:
        body = np.where(has_values, body, 0)
    return fields, body


def _feature_fields(name: str, column: _Column, n: int):
    """One column's map entries (``feature { key: name value { ... } }``) for every row,
    as fields, and the bytes each row's entry takes."""
    key = name.encode()
    body_fields, body = _list_body(column, n)
    present = column.present
    feature = 1 + _varint_sizes(body.astype(np.uint64)) + body
    if present is not None:
        feature = np.where(present, feature, 0)
    key_part = bytes([_TAG_1]) + _varint_bytes(len(key)) + key + bytes([_TAG_2])
    entry = len(key_part) + _varint_sizes(feature.astype(np.uint64)) + feature
    fields = [
        _const(bytes([_TAG_1])),
        _varint_field(entry),
        _const(key_part),
        _varint_field(feature),
        _const(bytes([_KIND_TAG[column.kind]]), present),
        _masked_field(_varint_field(body), present),
        *(_masked_field(f, present) for f in body_fields),
    ]
    return fields, 1 + _varint_sizes(entry.astype(np.uint64)) + entry


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _pack(fields, n: int) -> np.ndarray:
    """Lays the fields side by side in each row and keeps each row's used bytes, in order.
    Runs of fields the same in every row are joined first: a row is then a few wide
    copies, and with no mask at all the layout is the records as they are."""

    def constant(field) -> bool:
        return field[1] is None and field[0].shape[0] == 1

    merged: list = []
    for field in fields:
        if merged and constant(field) and constant(merged[-1]):
            merged[-1] = (np.concatenate([merged[-1][0], field[0]], axis=1), None)
        else:
            merged.append(field)
    width = sum(d.shape[1] for d, _ in merged)
    out = np.empty((n, width), dtype=np.uint8)
    used = None if all(m is None for _, m in merged) else np.ones((n, width), dtype=bool)
    at = 0
    for data, mask in merged:
        w = data.shape[1]
        out[:, at : at + w] = data
        if mask is not None:
            used[:, at : at + w] = mask
        at += w
    return out.reshape(-1) if used is None else out[used]


def encode_framed(batch: pa.RecordBatch) -> FramedRecords:
    """The rows of ``batch`` as TFRecord-framed serialized tf.Examples, one per row.

    A feature per column, named as the column, in the columns' order; a row whose list is
    null has the feature with no kind set, as tfx-bsl's encoder writes it.

    Raises:
        RuntimeError: tfx-bsl's error, for a column neither encoder takes (e.g. a list of
            strings or of float64).
    """
    rows = max(_MIN_SLICE_ROWS, _LAYOUT_BYTES // (_BYTES_PER_FEATURE * max(1, batch.num_columns)))
    if batch.num_rows > rows:  # a wide batch: its layout a slice of rows at a time
        parts = [encode_framed(batch.slice(at, rows)) for at in range(0, batch.num_rows, rows)]
        return FramedRecords(
            np.concatenate([p.data for p in parts]),
            sum(p.count for p in parts),
            sum(p.payload_bytes for p in parts),
        )
    n = batch.num_rows
    columns = [_column(batch.column(i)) for i in range(batch.num_columns)]
    if n == 0 or not columns or any(c is None for c in columns) or _sparse(columns, n):
        return frame_records(_tfx_bsl_encode(batch))
    fields, sizes = [], np.zeros(n, dtype=np.int64)
    for name, column in zip(batch.schema.names, columns):
        column_fields, entry_sizes = _feature_fields(name, column, n)
        fields += column_fields
        sizes += entry_sizes
    record = 1 + _varint_sizes(sizes.astype(np.uint64)) + sizes
    head = [
        (_header(record), None),
        _const(bytes([_TAG_1])),
        _varint_field(sizes),
    ]
    tail = [(np.zeros((n, 4), dtype=np.uint8), None)]  # the record's CRC, filled below
    out = _pack(head + fields + tail, n)
    _fill_crcs(out, record)
    return FramedRecords(out, n, int(record.sum()))


def _fill_crcs(out: np.ndarray, record: np.ndarray) -> None:
    """Writes each record's masked CRC32C into the 4 bytes after it. google-crc32c (the
    hardware instruction where there is one) per record: a table CRC in numpy walks the
    records a byte at a time, many times slower."""
    ends = np.cumsum(record + 16)
    starts = ends - 4 - record
    # google-crc32c takes bytes (not a view of numpy's buffer): slices of one copy.
    whole = out.tobytes()
    crc = google_crc32c.value
    records = map(whole.__getitem__, map(slice, starts.tolist(), (ends - 4).tolist()))
    crcs = np.fromiter(
        map(crc, records),
        dtype=np.uint32,
        count=len(record),
    )
    at = (ends - 4)[:, None] + np.arange(4)
    out[at] = _masked(crcs).view(np.uint8).reshape(-1, 4)


def frame_records(records: list[bytes]) -> FramedRecords:
    """Serialized records -> one buffer of them framed as TFRecords."""
    n = len(records)
    record = np.fromiter(map(len, records), dtype=np.int64, count=n)
    ends = np.cumsum(record + 16)
    out = np.empty(int(ends[-1]) if n else 0, dtype=np.uint8)
    starts = ends - record - 16
    out[starts[:, None] + np.arange(12)] = _header(record)
    body = np.frombuffer(b"".join(records), dtype=np.uint8)
    before = np.cumsum(record) - record  # where each record starts in body
    out[np.arange(len(body)) + np.repeat(starts + 12 - before, record)] = body
    _fill_crcs(out, record)
    return FramedRecords(out, n, int(record.sum()))


def _sparse(columns: list[_Column], n: int) -> bool:
    """Whether the padded layout would take many times the values' own bytes: rows whose
    lists (or strings) differ much in length. Counted before any of it is built."""
    padded = used = 0
    for column in columns:
        longest = int(column.counts.max())
        total = int(column.offsets[-1])
        if column.kind == "float":
            padded, used = padded + 4 * longest * n, used + 4 * total
        elif column.kind == "int64":
            low, high = (int(column.values.min()), int(column.values.max())) if total else (0, 0)
            width = 10 if low < 0 else int(_varint_sizes(np.array([high], np.uint64))[0])
            padded, used = padded + width * longest * n, used + total
        else:
            lengths = np.diff(column.values[0])
            widest = int(lengths.max()) if total else 0
            padded += (11 + widest) * longest * n
            used += 2 * total + int(lengths.sum())
    return padded > _MAX_PADDING * used + _PADDING_SLACK * n


def _tfx_bsl_encode(batch: pa.RecordBatch) -> list[bytes]:
    from tfx_bsl.coders import example_coder

    return example_coder.RecordBatchToExamplesEncoder().encode(batch)
