#!/usr/bin/env python3
"""Writes stealgate(8) in roff from `stealgate --help` and config/README.md.

    scripts/manpage.py BINARY CONFIG_README VERSION > stealgate.8

The options, signals and admin lines come from --help (what the binary actually accepts);
the CONFIGURATION section is config/README.md, converted: headings become subsections,
key tables become tagged paragraphs, code blocks stay verbatim. Nothing is written by
hand twice, so the page cannot drift from the binary or the config reference.
"""
import re
import subprocess
import sys


def escape(text):
    """Roff-escapes plain text and turns Markdown's inline marks into fonts."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"\*\*(.+?)\*\*", r"\\fB\1\\fR", text)
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)  # links: keep the words
    return text


def line(text):
    """One output line; a leading . or ' would be read as a request."""
    text = escape(text)
    return "\\&" + text if text[:1] in (".", "'") else text


def help_sections(help_text):
    """Splits --help into usage, description, options, and the trailing paragraphs."""
    blocks = [b for b in help_text.strip().split("\n\n")]
    usage = blocks[0].removeprefix("Usage: ").strip()
    description = blocks[1].strip()
    options = []
    trailing = []
    for block in blocks[2:]:
        if block.startswith("Options:"):
            rows = block.splitlines()[1:]
            # The descriptions start in one column; a long flag may leave one space before it.
            col = re.match(r"\s+\S.*?\s{2,}", rows[0]).end()
            options += [(r[:col].strip(), r[col:].strip()) for r in rows]
        else:
            trailing.append(block)
    return usage, description, options, trailing


def table_rows(rows):
    """A key | default | meaning table as tagged paragraphs."""
    out = []
    # A cell's own '|' is written "\\|" (the generated key tables escape it).
    cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", r.strip().strip("|"))] for r in rows]
    header, body = cells[0], cells[2:]
    for row in body:
        out.append(".TP")
        out.append(line(row[0]))
        rest = [f"{h}: {c}" for h, c in zip(header[1:-1], row[1:-1]) if c]
        text = row[-1] + (" (" + "; ".join(rest) + ")" if rest else "")
        out.append(line(text))
    return out


def markdown(md):
    """Converts the subset of Markdown config/README.md uses."""
    out = []
    lines = md.splitlines()
    i = 0
    para = []

    def flush():
        if para:
            out.append(".PP")
            out.extend(line(p) for p in para)
            para.clear()

    while i < len(lines):
        text = lines[i]
        if text.startswith("# "):  # the document title: the section heading replaces it
            i += 1
        elif text.startswith("<!--"):  # a marker around a generated table
            i += 1
        elif text.startswith("#"):
            flush()
            out.append(".SS " + escape(text.lstrip("#").strip()))
            i += 1
        elif text.startswith("```"):
            flush()
            out += [".PP", ".RS 4", ".nf"]
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append(line(lines[i]) if lines[i] else "")
                i += 1
            out += [".fi", ".RE"]
            i += 1
        elif text.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            out += table_rows(rows)
        elif re.match(r"\s*[-*] ", text):
            flush()
            item = [re.sub(r"^\s*[-*] ", "", text)]
            i += 1
            while i < len(lines) and lines[i].startswith("  ") and lines[i].strip():
                item.append(lines[i].strip())
                i += 1
            out += [".IP \\(bu 2"] + [line(t) for t in item]
        elif not text.strip():
            flush()
            i += 1
        else:
            para.append(text.strip())
            i += 1
    flush()
    return out


def main():
    binary, config_readme, version = sys.argv[1:4]
    help_text = subprocess.run([binary, "--help"], check=True, capture_output=True, text=True).stdout
    usage, description, options, trailing = help_sections(help_text)
    out = [
        f'.TH STEALGATE 8 "" "stealgate {version}" "System Administration"',
        ".SH NAME",
        "stealgate \\- " + escape(description.rstrip(".").removeprefix("An ").removeprefix("A ")),
        ".SH SYNOPSIS",
        line(usage),
        ".SH DESCRIPTION",
        line(description),
        "It runs as a systemd service (stealgate.service, with its listening sockets in",
        "stealgate.socket and stealgate\\-admin.socket).",
        ".SH OPTIONS",
    ]
    for flags, text in options:
        out += [".TP", "\\fB" + escape(flags) + "\\fR", line(text)]
    out.append(".SH SIGNALS AND ADMIN ENDPOINT")
    for block in trailing:
        out.append(".PP")
        out += [line(t) for t in block.splitlines()]
    out.append(".SH CONFIGURATION")
    with open(config_readme, encoding="utf-8") as f:
        out += markdown(f.read())
    out += [
        ".SH FILES",
        ".TP",
        "\\fI/etc/stealgate/stealgate.yaml\\fR",
        "the configuration (a conffile: local edits survive upgrades)",
        ".TP",
        "\\fI/usr/share/doc/stealgate/\\fR",
        "README.md and config/README.md",
        ".SH SEE ALSO",
        "\\fBsystemctl\\fR(1), \\fBsystemd.socket\\fR(5), \\fBsystemd.service\\fR(5)",
    ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
