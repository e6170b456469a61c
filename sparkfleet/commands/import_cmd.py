"""`sparkfleet import benchmark-spark FILE --out DIR`: published results as run records."""

from __future__ import annotations

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import RECORD_NAME
from sparkfleet.study import CAMPAIGN, HOST


def register(sub) -> None:
    p = sub.add_parser("import", help="turn published results into run records")
    kinds = p.add_subparsers(dest="source", metavar="SOURCE", required=True)
    spark = kinds.add_parser("benchmark-spark", help="the DGX Spark study's all_benchmark_results.json")
    spark.add_argument("file", metavar="FILE")
    spark.add_argument("--out", required=True, metavar="DIR",
                       help="results root; records go to DIR/<campaign>/<host>/runs/<run_id>/record.json")
    spark.add_argument("--campaign", default=CAMPAIGN)
    spark.add_argument("--host", default=HOST)
    spark.set_defaults(func=run_benchmark_spark)


def run_benchmark_spark(args) -> int:
    from sparkfleet import study

    campaign_dir = study.import_study(args.file, args.out, campaign=args.campaign, host=args.host)
    count = sum(1 for _ in campaign_dir.glob(f"*/runs/*/{RECORD_NAME}"))
    print(f"imported {count} runs into {campaign_dir} (report it with: sparkfleet report {campaign_dir})")
    return 0
