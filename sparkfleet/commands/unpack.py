"""`sparkfleet unpack ARCHIVE --campaign-dir DIR --host HOST`: merge a fetched host archive safely."""

from __future__ import annotations

from sparkfleet.unpack import unpack_host_archive


def register(sub) -> None:
    p = sub.add_parser("unpack", help="merge a host's fetched results archive into results/<campaign>/<host>/")
    p.add_argument("archive")
    p.add_argument("--campaign-dir", required=True, help="controller directory results/<campaign>")
    p.add_argument("--host", required=True)
    p.set_defaults(func=run)


def run(args) -> int:
    n = unpack_host_archive(args.archive, args.campaign_dir, args.host)
    print(f"{args.host}: {n} files into {args.campaign_dir}/{args.host}")
    return 0
