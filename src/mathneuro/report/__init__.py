"""Reports of sweeps: read every ``results.json`` of a Hydra multirun, tabulate, aggregate, plot.

Researchers look before they read: :func:`write_report` turns a sweep directory into a tidy CSV
(one row per point), a markdown summary (comparison tables over repeats and a list of every missing
or incomplete point) and the paper's figures as PNGs; :func:`log_report_to_wandb` sends the same to
W&B with columns that a dashboard can group by (method, filter, top_k, scalar, seed).

Modules: :mod:`~mathneuro.report.sweep` (reading a sweep), :mod:`~mathneuro.report.tables` (rows,
CSV, markdown, aggregates), :mod:`~mathneuro.report.figures`, :mod:`~mathneuro.report.summary`
(:func:`write_report`), :mod:`~mathneuro.report.wandb_log`. The flat row itself is
:func:`mathneuro.results.schema.tidy_row`.
"""

from mathneuro.util.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "mathneuro.report.figures": (
        "plot_data_efficiency", "plot_metric_vs_scalar", "plot_metric_vs_topk", "plot_overlap_heatmap",
        "plot_per_layer",
    ),
    "mathneuro.report.summary": ("write_report",),
    "mathneuro.report.sweep": ("load_results",),
    "mathneuro.report.tables": (
        "GROUP_FIELDS", "aggregate", "columns_of", "comparison_rows", "markdown_table", "metric_names", "tidy_rows",
        "write_csv",
    ),
    "mathneuro.report.wandb_log": ("WANDB_KEY_COLUMNS", "log_report_to_wandb", "wandb_table_columns"),
    "mathneuro.results.schema": ("POINT_FIELDS", "SELECTION_COLUMNS", "SELECTION_FIELDS", "tidy_row"),
})
