"""The numbers the IDBLA paper reports ("Generative Models for Learning from Crowds", section 5).

Typed from ``idbla.tex``: they are the only hard-coded results of the reproduction and are always labelled
"paper" in the report.
"""

from __future__ import annotations

__all__ = [
    "PAPER_DATASETS",
    "PAPER_TABLE2",
    "PAPER_TABLE3",
    "PAPER_LEVEL_ERROR",
    "PAPER_METHOD_NAMES",
    "PAPER_DATASET_OF",
]

#: Table 1: workers, items, labels, classes; mean/best worker accuracy from the dataset descriptions.
PAPER_DATASETS: dict[str, dict[str, float | None]] = {
    "Heartdisease": {"workers": 12, "items": 237, "labels": 952, "classes": 2,
                     "mean_accuracy": 0.6859, "best_accuracy": 0.8779},
    "Web Search": {"workers": 76, "items": 2653, "labels": 14638, "classes": 5,
                   "mean_accuracy": 0.4108, "best_accuracy": 0.7673},
    "RTE": {"workers": 164, "items": 800, "labels": 8000, "classes": 2,
            "mean_accuracy": 0.8370, "best_accuracy": None},
    "Synthetic": {"workers": 100, "items": 1000, "labels": 11615, "classes": 5,
                  "mean_accuracy": 0.4192, "best_accuracy": 0.8349},
}

#: Table 2: error rates (%), averages of 10 runs, keyed by our algorithm name then the paper's dataset.
PAPER_TABLE2: dict[str, dict[str, float]] = {
    "mv": {"Heartdisease": 24.89, "Web Search": 24.76, "RTE": 9.88, "Synthetic": 19.80},
    "ds": {"Heartdisease": 18.99, "Web Search": 18.58, "RTE": 7.50, "Synthetic": 13.50},
    "bcc": {"Heartdisease": 18.82, "Web Search": 21.57, "RTE": 7.15, "Synthetic": 11.26},
    "idbla": {"Heartdisease": 16.03, "Web Search": 16.66, "RTE": 7.13, "Synthetic": 9.50},
    "fixed-idbla": {"Heartdisease": 15.61, "Web Search": 18.77, "RTE": 7.50, "Synthetic": 9.50},
}

#: Table 3 (Heartdisease only): error rate with the paper's initialization and without it.
PAPER_TABLE3: dict[str, dict[str, float]] = {
    "idbla": {"paper": 0.160, "random": 0.409},
    "fixed-idbla": {"paper": 0.156, "random": 0.430},
}

#: Section 5.3.4 (Heartdisease only): average labeling error of the easiest and hardest predicted level.
PAPER_LEVEL_ERROR: dict[str, dict[str, float]] = {
    "idbla": {"easiest": 0.280, "hardest": 0.523},
    "fixed-idbla": {"easiest": 0.213, "hardest": 0.694},
}

PAPER_METHOD_NAMES: dict[str, str] = {
    "mv": "Majority vote", "ds": "DS-EM", "bcc": "BCC", "idbla": "IDBLA", "fixed-idbla": "Fixed-IDBLA",
}

#: our dataset name -> the paper's (Heartdisease is private and has no counterpart)
PAPER_DATASET_OF: dict[str, str] = {"web_search_filtered": "Web Search", "rte": "RTE", "synthetic": "Synthetic"}
