"""Render the document model as Markdown (summary.md) and as one self-contained HTML page (index.html)."""

from __future__ import annotations

import base64
import html

from sparkfleet.report.document import Bullets, Figure, Paragraph, Section, Table

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1400px;
padding:0 1rem;color:#1d2329;line-height:1.45}
h1{font-size:1.6rem}h2{border-bottom:1px solid #d0d7de;padding-bottom:.25rem;margin-top:2.2rem}
table{border-collapse:collapse;font-size:.8rem;margin:.6rem 0 1.2rem;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.2rem .45rem;text-align:right;white-space:nowrap}
th{background:#f3f5f7}td:nth-child(-n+4){text-align:left}caption{text-align:left;font-weight:600;
padding:.2rem 0}ul.warnings li{color:#8a4b00;margin:.15rem 0}figure{margin:1rem 0}
figure img{max-width:100%;border:1px solid #e3e6ea}figcaption{font-size:.85rem;color:#57606a}
.note{font-size:.8rem;color:#57606a}
"""


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(block: Table) -> list[str]:
    lines = [f"**{block.caption}**", ""] if block.caption else []
    header = [_md_escape(str(c)) for c in block.frame.columns]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for row in block.frame.itertuples(index=False, name=None):
        lines.append("| " + " | ".join(_md_escape(v) for v in row) + " |")
    if block.total_rows > len(block.frame):
        lines.append("")
        lines.append(f"*{len(block.frame)} of {block.total_rows} rows shown; all in report/{block.full_table}.*")
    return [*lines, ""]


def to_markdown(title: str, sections: list[Section]) -> str:
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Paragraph):
                lines += [block.text, ""]
            elif isinstance(block, Bullets):
                lines += [f"- {_md_escape(item)}" for item in block.items] + [""]
            elif isinstance(block, Table):
                lines += _md_table(block)
            elif isinstance(block, Figure):
                lines += [f"![{block.title}](plots/{block.name}.png)", ""]
    return "\n".join(lines)


def _html_table(block: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(str(c))}</th>" for c in block.frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>"
        for row in block.frame.itertuples(index=False, name=None)
    )
    caption = f"<caption>{esc(block.caption)}</caption>" if block.caption else ""
    note = ""
    if block.total_rows > len(block.frame):
        note = (f'<p class="note">{len(block.frame)} of {block.total_rows} rows shown; all in '
                f"{esc(block.full_table)} beside this page.</p>")
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def _html_figure(block: Figure) -> str:
    data = base64.b64encode(block.png).decode("ascii")
    title = html.escape(block.title)
    return (f'<figure id="fig-{html.escape(block.name)}"><img alt="{title}" '
            f'src="data:image/png;base64,{data}"><figcaption>{title}</figcaption></figure>')


def to_html(title: str, sections: list[Section]) -> str:
    """One file, no external resources: CSS inline, plots as data: URIs."""
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
             f"</title><style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for section in sections:
        parts.append(f"<section><h2>{html.escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Paragraph):
                parts.append(f"<p>{html.escape(block.text)}</p>")
            elif isinstance(block, Bullets):
                items = "".join(f"<li>{html.escape(item)}</li>" for item in block.items)
                parts.append(f'<ul class="{block.css_class}">{items}</ul>')
            elif isinstance(block, Table):
                parts.append(_html_table(block))
            elif isinstance(block, Figure):
                parts.append(_html_figure(block))
        parts.append("</section>")
    parts.append("</body></html>")
    return "".join(parts)
