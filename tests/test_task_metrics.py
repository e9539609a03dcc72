"""evaluation.task_metrics: the metric names a task reports, read from its lm-eval config, are the names its
results and records carry (``metric`` under the ``none`` filter, ``metric,filter`` under any other)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mathneuro.evaluation.task_metrics import reported_metrics


def test_our_twins_report_lm_evals_names_filter_by_filter(tmp_path: Path) -> None:
    assert reported_metrics("gsm8k_cot", tmp_path) == {"exact_match,strict-match", "exact_match,flexible-extract"}
    assert reported_metrics("egsm", tmp_path) == {"exact_match,strict-match", "exact_match,flexible-extract"}
    assert reported_metrics("minerva_math", tmp_path) == {"exact_match", "math_verify"}  # a group: its subjects'
    assert reported_metrics("mmlu", tmp_path) == {"acc"}
    assert reported_metrics("hellaswag", tmp_path) == {"acc", "acc_norm"}
    assert reported_metrics("mutual", tmp_path) == {"r@1", "r@2", "mrr"}
    assert reported_metrics("wikitext", tmp_path) == {"word_perplexity", "byte_perplexity", "bits_per_byte"}


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.yaml").write_text(textwrap.dedent(text))


def test_a_users_tasks_groups_and_defaults(tmp_path: Path) -> None:
    """A user's folder: lm-eval's default metrics where a task names none, every filter's names, and a group
    reports only what all of its tasks report (its pooled reading needs every subtask)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    common = "dataset_path: json\ndataset_kwargs: {data_files: {test: x.jsonl}}\ntest_split: test\n"
    _write(folder, "my_mc", f"task: my_mc\noutput_type: multiple_choice\n{common}doc_to_text: q\ndoc_to_target: 0\n"
                            "doc_to_choice: [a, b]\ntag: [my_tag]\n")
    _write(folder, "my_gen", f"""\
        task: my_gen
        output_type: generate_until
        {common.replace(chr(10), chr(10) + '        ')}doc_to_text: q
        doc_to_target: a
        metric_list: [{{metric: exact_match}}, {{metric: acc}}]
        filter_list:
          - name: first
            filter: [{{function: take_first}}]
          - name: last
            filter: [{{function: take_first}}]
        """)
    _write(folder, "my_group", "group: my_group\ntask: [my_mc, my_gen]\n")
    _write(folder, "my_fn", f"task: my_fn\noutput_type: generate_until\n{common}doc_to_text: q\ndoc_to_target: a\n"
                            "metric_list:\n  - metric: !function scoring.my_score\n    aggregation: mean\n")
    (folder / "scoring.py").write_text("def my_score(items):\n    return 1.0\n")
    paths = [folder]
    assert reported_metrics("my_mc", include_paths=paths) == {"acc", "acc_norm"}
    assert reported_metrics("my_gen", include_paths=paths) == {"exact_match,first", "exact_match,last", "acc,first",
                                                               "acc,last"}
    assert reported_metrics("my_tag", include_paths=paths) == {"acc", "acc_norm"}
    assert reported_metrics("my_fn", include_paths=paths) == {"my_score"}  # lm-eval names it after the function
    assert reported_metrics("my_group", include_paths=paths) == set()  # no metric both tasks name alike
    with pytest.raises(KeyError, match="my_gne"):
        reported_metrics("my_gne", include_paths=paths)
