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

from mathneuro.report.figures import (
    plot_data_efficiency,
    plot_metric_vs_scalar,
    plot_metric_vs_topk,
    plot_overlap_heatmap,
    plot_per_layer,
)
from mathneuro.report.summary import write_report
from mathneuro.report.sweep import load_results
from mathneuro.report.tables import (
    GROUP_FIELDS,
    aggregate,
    columns_of,
    comparison_rows,
    markdown_table,
    metric_names,
    tidy_rows,
    write_csv,
)
from mathneuro.report.wandb_log import WANDB_KEY_COLUMNS, log_report_to_wandb, wandb_table_columns
from mathneuro.results.schema import POINT_FIELDS, SELECTION_COLUMNS, SELECTION_FIELDS, tidy_row

__all__ = [
    "GROUP_FIELDS", "POINT_FIELDS", "SELECTION_COLUMNS", "SELECTION_FIELDS", "WANDB_KEY_COLUMNS", "aggregate",
    "columns_of", "comparison_rows", "load_results", "log_report_to_wandb", "markdown_table", "metric_names",
    "plot_data_efficiency", "plot_metric_vs_scalar", "plot_metric_vs_topk", "plot_overlap_heatmap", "plot_per_layer",
    "tidy_row", "tidy_rows", "wandb_table_columns", "write_csv", "write_report",
]
