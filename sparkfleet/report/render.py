"""Render the document model as Markdown (summary.md) and as one self-contained HTML page (index.html)."""

from __future__ import annotations

import base64
import html

from sparkfleet.report.document import Block, Bullets, Details, Figure, Paragraph, Section, Table, Verdicts

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
section.verdicts h2{margin-top:1rem}ul.verdicts{list-style:none;padding:0;margin:.4rem 0 1rem}
ul.verdicts li{margin:.35rem 0;padding:.35rem .6rem;border-left:4px solid #8c959f;background:#f6f8fa;
font-size:1rem}ul.verdicts li.different{border-color:#bc4c00}ul.verdicts li.same{border-color:#1a7f37}
ul.verdicts li.undetermined{border-color:#8c959f}.badge{display:inline-block;min-width:6.5rem;
font-size:.72rem;font-weight:700;text-transform:uppercase;letter-spacing:.03em;margin-right:.5rem;color:#57606a}
li.different .badge{color:#bc4c00}li.same .badge{color:#1a7f37}
ul.verdicts .detail{font-size:.82rem;color:#57606a;margin-top:.15rem}
details{margin:.4rem 0 1rem}details summary{cursor:pointer;color:#0969da;font-size:.9rem}
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


def _md_blocks(blocks: list[Block]) -> list[str]:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Paragraph):
            lines += [block.text, ""]
        elif isinstance(block, Bullets):
            lines += [f"- {_md_escape(item)}" for item in block.items] + [""]
        elif isinstance(block, Verdicts):
            for label, _, headline, text in block.lines:
                lines.append(f"- **{label.upper()}** · " + (f"**{_md_escape(headline)}**  \n  {_md_escape(text)}"
                                                            if headline else _md_escape(text)))
            lines.append("")
        elif isinstance(block, Table):
            lines += _md_table(block)
        elif isinstance(block, Figure):
            lines += [f"![{block.title}](plots/{block.name}.png)", ""]
        elif isinstance(block, Details):
            lines += [f"<details><summary>{html.escape(block.summary)}</summary>", "", *_md_blocks(block.blocks),
                      "</details>", ""]
    return lines


def to_markdown(title: str, sections: list[Section]) -> str:
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"## {section.title}", "", *_md_blocks(section.blocks)]
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


def _html_blocks(blocks: list[Block]) -> list[str]:
    esc = html.escape
    parts = []
    for block in blocks:
        if isinstance(block, Paragraph):
            parts.append(f"<p>{esc(block.text)}</p>")
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{esc(item)}</li>" for item in block.items)
            parts.append(f'<ul class="{block.css_class}">{items}</ul>')
        elif isinstance(block, Verdicts):
            items = "".join(
                f'<li class="{esc(outcome)}"><span class="badge">{esc(label)}</span>'
                + (f'<strong class="headline">{esc(headline)}</strong><div class="detail">{esc(text)}</div>'
                   if headline else f'<span class="headline">{esc(text)}</span>') + "</li>"
                for label, outcome, headline, text in block.lines)
            parts.append(f'<ul class="verdicts" id="verdicts">{items}</ul>')
        elif isinstance(block, Table):
            parts.append(_html_table(block))
        elif isinstance(block, Figure):
            parts.append(_html_figure(block))
        elif isinstance(block, Details):
            parts.append(f"<details><summary>{esc(block.summary)}</summary>{''.join(_html_blocks(block.blocks))}"
                         "</details>")
    return parts


def _section_id(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def to_html(title: str, sections: list[Section]) -> str:
    """One file, no external resources: CSS inline, plots as data: URIs."""
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
             f"</title><style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for section in sections:
        css = _section_id(section.title)
        parts.append(f'<section class="{css}" id="section-{css}"><h2>{html.escape(section.title)}</h2>')
        parts += _html_blocks(section.blocks)
        parts.append("</section>")
    parts.append("</body></html>")
    return "".join(parts)
