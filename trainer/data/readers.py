"""Data files: JSONL, JSON, CSV/TSV and Parquet, plain or gzip-compressed, UTF-8 (a BOM allowed);
every reader ends in the same row checks (trainer.data.rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from trainer.chat.types import Row
from trainer.core.errors import UserError, brief, collect
from trainer.data.formats import convert, format_problems, row_format
from trainer.core.jsontext import ESCAPED_SURROGATE, json_type, loads, repeated_key, json_loads, surrogate_problem
from trainer.data.rows import checked_rows, row_problems, validate_rows


def read_jsonl(path: str | Path, shown: str = "") -> list[Row]:
    """Read and validate a JSONL file; errors name the file, the line and the reason.

    UTF-8, with or without the byte-order mark some editors write; gzip-compressed when the
    name ends in .gz. A file in another encoding, or not text at all, fails with one line
    saying so, not one per row.
    """
    path = Path(path)
    name = shown or str(path)  # what messages call the file: the object it was downloaded from, if it was
    if not path.is_file():
        raise UserError(f"dataset file not found: {name}. Pass an existing .jsonl file or directory.")
    rows: list[dict[str, Any]] = []
    problems: list[tuple[int | None, str]] = []
    formats: list[tuple[int, str | None]] = []
    with _open_bytes(path, name) as f:
        head = f.read(8)
        f.seek(0)
        if (kind := _binary_kind(head)) or b"\0" in f.read(1 << 16):
            fix = {
                "gzip-compressed": "gunzip",
                "zstd-compressed": "unzstd",
                "bzip2-compressed": "bunzip2",
                "a zip archive": "unzip",
            }.get(kind or "")
            also = (
                f" (decompress it first: {fix} {path.name})"
                if fix
                else " (name it .parquet and it is read as Parquet)"
                if kind == "Parquet"
                else ""
            )
            raise UserError(
                f"{name} is not JSONL text ({kind or 'binary data'}): give a UTF-8 .jsonl file with "
                f"one JSON object per line{also}"
            )
        f.seek(0)
        if f.read(1 << 16).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):  # a JSON list named .jsonl
            value = _whole_json(path, name)
            if isinstance(value, list):
                return validate_rows(value, name)
        f.seek(0)
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise UserError(
                    f"{name}:{lineno}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column "
                    f"{err.start + 1}); save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 "
                    f"{path.name} > fixed.jsonl`"
                ) from None
            if not line.strip():
                continue
            try:
                row, repeated = loads(line)
            except json.JSONDecodeError as err:
                problems.append((lineno, f"not valid JSON ({err.msg} at column {err.colno})"))
                continue
            except RecursionError:
                problems.append(
                    (
                        lineno,
                        "JSON nested too deeply for the parser (about 1000 levels or more); a "
                        "chat row needs a handful: check how the file was generated",
                    )
                )
                continue
            problems += [(lineno, repeated_key(k)) for k in repeated]
            row, fmt = convert(row)
            problems += [(lineno, p) for p in row_problems(row)]
            if ESCAPED_SURROGATE.search(line) and (problem := surrogate_problem(row, "")):
                problems.append((lineno, problem))
            rows.append(row)
            formats.append((lineno, fmt))
    problems += format_problems(formats)
    if not rows and not problems:
        problems.append((None, "file has no rows"))
    return checked_rows(rows, (lineno for lineno, _ in formats), problems, [fmt for _, fmt in formats], name, "line")


FILE_TYPES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")  # what read_rows reads, by extension


def read_rows(path: str | Path, shown: str = "") -> list[Row]:
    """Read and validate a dataset file of any FILE_TYPES; other extensions are read as JSONL.

    A `.json` file is a JSON list of rows, or JSON Lines under another name (common on the
    Hub). Problems name the file and the line (JSONL) or row (other formats).
    """
    path = Path(path)
    name = shown or str(path)
    suffix = suffix_of(path)
    if not path.is_file() or suffix not in (".json", ".csv", ".tsv", ".parquet"):
        return read_jsonl(path, shown)
    if suffix == ".parquet":
        return validate_rows(_parquet_rows(path, name), name, columnar=True)
    text = _utf8_text(path, name)
    if suffix in (".csv", ".tsv"):
        return validate_rows(_csv_rows(path, name, text, "\t" if suffix == ".tsv" else ","), name)
    try:
        value, repeated = loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("["):
            raise UserError(
                f"{name}: not valid JSON ({err.msg}: line {err.lineno}, column {err.colno}); a .json "
                "dataset is one JSON list of row objects (or JSONL, one object per line)"
            ) from None
        return read_jsonl(path, shown)  # JSON Lines named .json
    except RecursionError:
        raise UserError(
            f"{name}: JSON nested too deeply for the parser; a chat dataset needs a handful of "
            "levels: check how the file was generated"
        ) from None
    collect([f"{name}: an object {repeated_key(k)}" for k in dict.fromkeys(repeated)], what=f"bad dataset {name}")
    if isinstance(value, dict) and row_format(value):
        value = [value]  # one row, in any format
    if not isinstance(value, list):
        raise UserError(
            f"{name} holds a JSON {json_type(value)}, not a list of rows: give a JSON list of "
            "{\"messages\": [...]} objects, or JSONL (one object per line)"
        )
    return validate_rows(value, name)


def _whole_json(path: Path, name: str) -> Any:
    """The file parsed as one JSON value, or None when it is not one."""
    try:
        value, repeated = loads(_utf8_text(path, name))
    except (json.JSONDecodeError, RecursionError):
        return None
    collect([f"{name}: an object {repeated_key(k)}" for k in dict.fromkeys(repeated)], what=f"bad dataset {name}")
    return value


def suffix_of(path: Path) -> str:
    """The format's extension: `.jsonl` for both data.jsonl and data.jsonl.gz."""
    suffixes = [s.lower() for s in path.suffixes]
    return suffixes[-2] if suffixes[-1:] == [".gz"] and len(suffixes) > 1 else path.suffix.lower()


def _open_bytes(path: Path, name: str):
    """The file's bytes, gunzipped when its name ends in .gz (a file that is not gzip fails
    with one UserError, not gzip's traceback, on the first read)."""
    if path.suffix.lower() != ".gz":
        return path.open("rb")
    import gzip

    return _GzipReader(gzip.open(path, "rb"), name)


class _GzipReader:
    """gzip.GzipFile whose decompression errors are UserErrors naming the file."""

    def __init__(self, f, name: str):
        self._f, self._name = f, name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def _guard(self, call, *args):
        import gzip
        import zlib

        try:
            return call(*args)
        except (gzip.BadGzipFile, EOFError, zlib.error) as err:
            raise UserError(
                f"{self._name} is not a readable gzip file ({err}); give it uncompressed, or compress it "
                "again with gzip"
            ) from None

    def read(self, *args):
        return self._guard(self._f.read, *args)

    def seek(self, *args):
        return self._guard(self._f.seek, *args)

    def __iter__(self):
        while line := self._guard(self._f.readline):
            yield line


def _utf8_text(path: Path, name: str) -> str:
    """The file as text: UTF-8 with or without BOM, else one line saying how to convert it."""
    with _open_bytes(path, name) as f:
        raw = f.read()
    if kind := _binary_kind(raw[:8]):
        raise UserError(
            f"{name} is {kind}, not {path.suffix[1:].upper()} text: give UTF-8 text, or name the file "
            "by its format (.jsonl, .json, .csv, .tsv, .parquet)"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"{name}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x}); save the file as UTF-8, "
            f"e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}`"
        ) from None


def _csv_rows(path: Path, name: str, text: str, delimiter: str = ",") -> list[dict[str, Any]]:
    """CSV (or TSV) rows with a header; empty cells are absent (but an empty prompt or completion), and a prompt or
    completion cell holding a JSON list of messages is parsed (one that is plain text stays text)."""
    import csv
    import io

    csv.field_size_limit(1 << 30)  # the default 128 KiB refuses a long conversation in one cell
    out = []
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
        header = reader.fieldnames or []
        if twice := sorted({k for k in header if header.count(k) > 1 and k}):
            raise UserError(
                f"{name}: the header names the column{'s' if len(twice) > 1 else ''} "
                f"{', '.join(map(repr, twice))} twice (only the last would be read): rename or drop one"
            )
        for row in reader:
            # An empty prompt or completion cell stays an empty string, which the row checks name ("every assistant
            # message is empty"); absent, it read as "row has no 'messages' field (its keys: none)".
            pair = not row.get("messages")  # a chat row's empty prompt and completion columns say nothing
            cells = {
                k: v
                for k, v in row.items()
                if k is not None and (v not in (None, "") or (pair and v == "" and k in ("prompt", "completion")))
            }
            for key in ("prompt", "completion"):  # messages and tools as JSON text: convert parses them
                value = cells.get(key)
                if isinstance(value, str) and value.lstrip().startswith("["):
                    try:
                        parsed = json_loads(value)
                    except (json.JSONDecodeError, RecursionError):
                        continue  # text that starts with '[': a prompt like any other
                    if isinstance(parsed, list) and parsed and all(isinstance(m, dict) for m in parsed):
                        cells[key] = parsed  # a conversational prompt / completion
            flag = cells.get("parallel_tool_calls")  # OpenAI's boolean, as CSV writes it (pandas: True / False)
            if isinstance(flag, str) and flag.strip().lower() in ("true", "false"):
                cells["parallel_tool_calls"] = flag.strip().lower() == "true"
            out.append(cells)
    except csv.Error as err:
        raise UserError(
            f"{name} is not readable CSV ({err}); give a CSV with a header row, e.g. prompt,completion "
            "or messages (JSON text)"
        ) from None
    return out


def _parquet_rows(path: Path, name: str) -> list[dict[str, Any]]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        if twice := sorted({k for k in names if names.count(k) > 1}):
            raise UserError(
                f"{name} has the column{'s' if len(twice) > 1 else ''} {', '.join(map(repr, twice))} "
                "twice: rename or drop one"
            )
        return pq.read_table(path).to_pylist()
    except (pyarrow.ArrowException, OSError) as err:
        raise UserError(
            f"{name} is not a readable Parquet file ({brief(err)}); write it again, "
            "e.g. with pandas `df.to_parquet(path)`"
        ) from None


_MAGIC = {
    b"\x1f\x8b": "gzip-compressed",
    b"PK\x03\x04": "a zip archive",
    b"PAR1": "Parquet",
    b"\x28\xb5\x2f\xfd": "zstd-compressed",
    b"BZh": "bzip2-compressed",
    b"\xff\xfe": "UTF-16 text",
    b"\xfe\xff": "UTF-16 text",
    b"ARROW1": "Arrow",
}


def _binary_kind(head: bytes) -> str | None:
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)


# Written by the deliver-dataset step beside its splits, once every row was converted and passed trainer.data.rows'
# checks: the readers downstream (training's ranks at every start, evaluation, the contamination check) then read the
# delivered rows as plain JSON lines. ROW_CHECKS changes with the checks or the conversions, so that a tree delivered
# under older rules is checked again where it is read.
CHECKED = "_rows_checked.json"
ROW_CHECKS = 1


def write_delivered(splits: Mapping[str, Iterable[Mapping[str, Any]]], root: str | Path) -> dict[str, int]:
    """Write each split as `<name>.jsonl` under `root`, and CHECKED beside them; returns the rows per split. Only for
    rows that passed the row checks (the deliver-dataset step's)."""
    counts = {name: write_jsonl(rows, Path(root) / f"{name}.jsonl") for name, rows in splits.items()}
    (Path(root) / CHECKED).write_text(json.dumps({"row_checks": ROW_CHECKS, "rows": counts}) + "\n")
    return counts


def read_delivered(path: str | Path) -> list[Row]:
    """A split of a delivered tree (`train.jsonl`, `eval.jsonl`): plain JSON lines when the tree records that its
    rows were checked under today's rules (CHECKED, ROW_CHECKS), else `read_jsonl` with every conversion and check
    (a tree delivered before, or not by deliver-dataset)."""
    path = Path(path)
    try:
        checked = json.loads((path.parent / CHECKED).read_text()).get("row_checks") == ROW_CHECKS
    except (OSError, ValueError, AttributeError):  # none, unreadable or not an object: check the rows
        checked = False
    if not checked:
        return read_jsonl(path)
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write rows as JSONL; returns the row count."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n
