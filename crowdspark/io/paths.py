"""Local paths, URIs and file formats of the inputs: which data files a path names, and their format.

A path with no URI scheme, or ``file:``, is local; anything else (``hdfs://``, ``s3a://`` ...) is read by
Spark.  Files and folders whose name starts with ``_`` or ``.`` are not data (Spark's ``_SUCCESS``, our
markers, checksum files).
"""

from __future__ import annotations

import glob as _glob
import os
from pathlib import Path

from crowdspark.errors import ConfigError, InputError

__all__ = [
    "is_local",
    "absolute_local",
    "strip_file_scheme",
    "check_local_folder_writable",
    "resolve_local_paths",
    "infer_format",
    "resolve_format",
]


_EXTENSIONS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json"}


_SCHEME_PREFIXES = ("file:",)


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local filesystem (no URI scheme, or ``file:``)."""
    return "://" not in path or path.startswith(_SCHEME_PREFIXES)


def absolute_local(path: str) -> str:
    """``path`` made absolute (from the current folder) when it is a plain local path; a URI (``scheme://``,
    ``file:``) as given."""
    return path if "://" in path or path.startswith(_SCHEME_PREFIXES) else os.path.abspath(path)


def strip_file_scheme(path: str) -> str:
    """``path`` as a path of the local filesystem: without its ``file:`` scheme, in each form Hadoop reads as
    local (``file:///x``, ``file:/x`` and ``file://localhost/x`` are all ``/x``)."""
    if not path.startswith("file:"):
        return path
    rest = path[len("file:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
    return rest


def check_local_folder_writable(folder: str, what: str) -> None:
    """Refuse a local ``folder`` this user could neither write nor create (its nearest existing ancestor
    is not a writable folder).

    Parameters
    ----------
    folder : str
        A local path (``file:`` allowed), existing or not.
    what : str
        What the user gave, for the message (``"engine.checkpoint_dir '/x'"``).

    Raises
    ------
    ConfigError
    """
    wanted = strip_file_scheme(folder)
    existing = wanted
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing.rstrip("/"))
    existing = existing or "."
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        problem = "is not a folder" if not os.path.isdir(existing) else "cannot be written by this user"
        raise ConfigError(f"{what}: {existing!r} {problem}; give a folder the job can write (it is created if "
                          "missing)")
    _check_name_lengths(wanted, existing, what)


def _check_name_lengths(wanted: str, existing: str, what: str) -> None:
    """Refuse a path to create below the folder ``existing`` whose new names or whole length the filesystem
    there does not allow (``NAME_MAX`` bytes per name, ``PATH_MAX`` in all).

    Raises
    ------
    ConfigError
    """
    def limit(name: str, default: int) -> int:
        try:
            return os.pathconf(existing, name)
        except (OSError, ValueError):
            return default

    name_max, path_max = limit("PC_NAME_MAX", 255), limit("PC_PATH_MAX", 4096)
    missing = os.path.relpath(os.path.abspath(wanted), os.path.abspath(existing))
    for part in missing.split(os.sep):
        if len(os.fsencode(part)) > name_max:
            raise ConfigError(f"{what}: it cannot be created: the name {part[:24] + '...'!r} is "
                              f"{len(os.fsencode(part))} bytes long, and a name in {existing!r} may have at most "
                              f"{name_max}; give a shorter path")
    if len(os.fsencode(os.path.abspath(wanted))) >= path_max:
        raise ConfigError(f"{what}: it cannot be created: the path is {len(os.fsencode(os.path.abspath(wanted)))} "
                          f"bytes long, and a path may have at most {path_max - 1}; give a shorter path")


def resolve_local_paths(path: str, what: str) -> list[str]:
    """Data files behind a local file, folder or glob (hidden and ``_``-prefixed files skipped).

    Raises
    ------
    InputError
        If nothing readable is there.
    """
    local = strip_file_scheme(path)
    if any(ch in local for ch in "*?["):
        files = sorted(p for p in _glob.glob(local, recursive=True) if os.path.isfile(p))
    elif os.path.isdir(local):
        files = sorted(
            str(p)
            for p in Path(local).rglob("*")
            if p.is_file() and not any(part.startswith(("_", ".")) for part in p.relative_to(local).parts)
        )
    elif os.path.isfile(local):
        files = [local]
    elif os.path.exists(local):
        raise InputError(_special_file(path, local, what))
    else:
        raise InputError(f"cannot read {what}: path {path!r} does not exist. Check the path (--{what} PATH).")
    files = [f for f in files if not os.path.basename(f).startswith(("_", "."))]
    if not files:
        raise InputError(f"cannot read {what}: {path!r} matches no data file. Check the path (--{what} PATH).")
    unreadable = [f for f in files if not os.access(f, os.R_OK)]
    if unreadable:
        raise InputError(f"cannot read {what}: {unreadable[0]!r} is not readable (check its permissions).")
    return files


def _special_file(path: str, local: str, what: str) -> str:
    """What a path that is neither a regular file nor a folder is, for the message refusing it."""
    import stat

    mode = os.stat(local).st_mode
    if os.path.realpath(local) == os.path.realpath(os.devnull):
        kind = "the null device: an empty input, with no rows and no header"
    else:
        kind = {stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a named pipe",
                stat.S_ISSOCK: "a socket"}
        kind = next((name for test, name in kind.items() if test(mode)), "not a regular file")
        kind += ", not a file or folder of data"
    return (f"cannot read {what}: {path!r} is {kind}; there is nothing to read. Give a file, folder or glob "
            f"(--{what} PATH).")


def infer_format(path: str, files: list[str] | None, what: str) -> str:
    """The format of ``path`` from its files' extensions (or its own name when files are unknown)."""
    names = files if files else [path]
    formats = set()
    for name in names:
        base = name[:-3] if name.endswith((".gz", ".bz2")) else name
        fmt = _EXTENSIONS.get(os.path.splitext(base)[1].lower())
        formats.add(fmt)
    if len(formats) == 1 and None not in formats:
        return formats.pop()
    found = sorted(str(f) for f in formats)
    raise InputError(
        f"cannot infer the format of {what} at {path!r} (found {', '.join(found)}); "
        f"set it with --set {'input' if what == 'labels' else 'gold'}.format=csv|parquet|json"
    )


def resolve_format(path: str, fmt: str, what: str) -> str:
    """``fmt``, or with ``"auto"`` the format inferred from the files' extensions (local paths checked)."""
    files = resolve_local_paths(path, what) if is_local(path) else None
    return infer_format(path, files, what) if fmt == "auto" else fmt
