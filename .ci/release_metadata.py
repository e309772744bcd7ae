"""Refuse to publish distributions whose metadata does not say where the project lives.

    python .ci/release_metadata.py DIST_DIR --repository https://github.com/OWNER/NAME

The workflow's publish job runs this before uploading. Every sdist (its PKG-INFO) and every
wheel (its METADATA) in DIST_DIR must carry a ``Project-URL`` whose address is the repository
the tag was pushed to, and all of them the same ``Project-URL`` lines. PyPI shows those lines as
the project's links and nothing checks them after upload, so a release without them, or with
an address copied from another project, is stopped here. Until the project is hosted there is
no address to write; ``[project.urls]`` is added with the first release (CONTRIBUTING.md, "Cut
a release").

Exit status 0 when every distribution passes, 1 with one line per problem on stderr, 2 when
DIST_DIR holds no distribution.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path


def metadata_of(dist: Path) -> str:
    """The core metadata text of an sdist (``*.tar.gz``: its top-level PKG-INFO) or a wheel
    (``*.whl``: its ``*.dist-info/METADATA``)."""
    if dist.name.endswith(".tar.gz"):
        with tarfile.open(dist) as tar:
            names = [m for m in tar.getmembers()
                     if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
            if len(names) != 1:
                raise ValueError("no top-level PKG-INFO")
            f = tar.extractfile(names[0])
            assert f is not None                 # a regular file, checked above
            return f.read().decode("utf-8")
    with zipfile.ZipFile(dist) as whl:
        names = [n for n in whl.namelist()
                 if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ValueError("no .dist-info/METADATA")
        return whl.read(names[0]).decode("utf-8")


def project_urls(metadata: str) -> list[tuple[str, str]]:
    """The ``Project-URL: label, address`` lines, as (label, address) pairs, in order."""
    urls = []
    for value in HeaderParser().parsestr(metadata).get_all("Project-URL") or []:
        label, sep, address = value.partition(",")
        urls.append((label.strip(), address.strip()) if sep else ("", value.strip()))
    return urls


def problems(dists: list[Path], repository: str) -> list[str]:
    """What stops these distributions from being published (empty: nothing)."""
    repo = repository.rstrip("/").lower()
    out: list[str] = []
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    for dist in dists:
        try:
            urls = project_urls(metadata_of(dist))
        except (OSError, ValueError, tarfile.TarError, zipfile.BadZipFile) as exc:
            out.append(f"{dist.name}: cannot read its metadata: {exc}")
            continue
        if not urls:
            out.append(f"{dist.name}: no Project-URL: add [project.urls] to pyproject.toml")
        elif not any(a.rstrip("/").lower() == repo or a.lower().startswith(repo + "/")
                     for _, a in urls):
            out.append(f"{dist.name}: no Project-URL names {repository} "
                       f"(it names {', '.join(a for _, a in urls)})")
        seen.setdefault(tuple(urls), dist.name)
    if len(seen) > 1:
        out.append("the distributions disagree on their Project-URL lines: "
                   + "; ".join(f"{name}: {list(urls)}" for urls, name in seen.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dist_dir", type=Path)
    ap.add_argument("--repository", required=True,
                    help="the repository's address, e.g. https://github.com/OWNER/NAME")
    args = ap.parse_args(argv)
    dists = sorted([*args.dist_dir.glob("*.tar.gz"), *args.dist_dir.glob("*.whl")])
    if not dists:
        print(f"no sdist or wheel in {args.dist_dir}", file=sys.stderr)
        return 2
    found = problems(dists, args.repository)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print(f"{len(dists)} distributions name {args.repository}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
