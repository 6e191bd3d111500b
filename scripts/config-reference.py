#!/usr/bin/env python3
"""Copies the configuration key reference into config/README.md.

The tables are generated from the section tables in src/config/sections*.cpp
(`stealgate --config-reference`); README.md holds each between
`<!-- config table: NAME -->` and `<!-- end of config table -->`, with prose around them.
A unit test (config_unit: ConfigReference.ReadmeHoldsTheGeneratedTables) fails when they
differ, so after changing a key:

    scripts/config-reference.py [path/to/stealgate]      # default: build-test/src/stealgate
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- config table: (.+?) -->\n.*?<!-- end of config table -->\n", re.S)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build-test" / "src" / "stealgate")
    generated = subprocess.run([binary, "--config-reference"], check=True, capture_output=True, text=True).stdout
    tables = {m.group(1): m.group(0) for m in BLOCK.finditer(generated)}
    readme_path = ROOT / "config" / "README.md"
    readme = readme_path.read_text()
    present = {m.group(1) for m in BLOCK.finditer(readme)}
    for name in sorted(present - tables.keys()):
        sys.exit(f"config/README.md has a table for \"{name}\", which no longer exists: remove its block")
    readme = BLOCK.sub(lambda m: tables[m.group(1)], readme)
    readme_path.write_text(readme)
    missing = [name for name in tables if name not in present]
    for name in missing:
        print(f"config/README.md has no place for the table \"{name}\"; add these lines where it belongs:\n"
              f"<!-- config table: {name} -->\n<!-- end of config table -->\n", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
