"""The PEP 517 build backend of this distribution: one pure-Python package, standard library
only, so `pip install ./clients/python` works offline (no setuptools or wheel to download).
Metadata comes from pyproject.toml's [project] table; the wheel holds ojsd_client/ (with
py.typed) and its dist-info."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "ojsd_client"


def _project() -> dict:
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        text = f.read().decode()
    try:
        import tomllib  # Python >= 3.11
        return tomllib.loads(text)["project"]
    except ImportError:  # 3.9/3.10: the table uses only one-line strings and string lists
        table = text.split("[project]", 1)[1].split("\n[", 1)[0]
        out: dict = {}
        for key, value in re.findall(r'^([\w-]+)\s*=\s*(\[[^\]]*\]|.+)$', table, re.M):
            if value.startswith('"'):
                out[key] = value.strip().strip('"')
            elif value.startswith("["):
                out[key] = re.findall(r'"([^"]*)"', value)
        return out


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p['description']}", f"Requires-Python: {p['requires-python']}",
             "License: MIT"]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return "\n".join(lines) + "\n\n" + f.read()


def _base() -> str:
    p = _project()
    return f"{re.sub(r'[-_.]+', '_', p['name']).lower()}-{p['version']}"


def _package_files():
    root = os.path.join(HERE, PACKAGE)
    for name in sorted(os.listdir(root)):
        if name.endswith(".py") or name == "py.typed":
            yield f"{PACKAGE}/{name}", os.path.join(root, name)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _dist_info(base: str) -> dict:
    wheel = "Wheel-Version: 1.0\nGenerator: ojsd_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {f"{base}.dist-info/METADATA": _metadata().encode(),
            f"{base}.dist-info/WHEEL": wheel.encode(),
            f"{base}.dist-info/top_level.txt": f"{PACKAGE}\n".encode()}


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    base = _base()
    for name, data in _dist_info(base).items():
        path = os.path.join(metadata_directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return f"{base}.dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    base = _base()
    files = {arc: open(path, "rb").read() for arc, path in _package_files()}
    files.update(_dist_info(base))
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{base}.dist-info/RECORD,,")
    files[f"{base}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{base}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(zipfile.ZipInfo(arc, (2020, 1, 1, 0, 0, 0)), data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = _base()
    name = f"{base}.tar.gz"
    members = [("pyproject.toml", "pyproject.toml"), ("README.md", "README.md"),
               ("_build/ojsd_build.py", "_build/ojsd_build.py"), *_package_files()]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for arc, path in members:
            t.add(os.path.join(HERE, path) if not os.path.isabs(path) else path,
                  arcname=f"{base}/{arc}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
