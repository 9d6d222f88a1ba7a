"""Install the evaluator (also what Dataflow workers install via --setup_file ./setup.py)."""

from setuptools import find_packages, setup

# httpx is test-only: an independent client for the test server's own tests (the evaluator uses aiohttp).
# wheel is test-only too: the console-command test installs the project offline (--no-build-isolation), and
# setuptools before 70.1 builds wheels only with it.
TEST = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.5",  # scripts/test.sh runs the suite on both cores (-n 2): most tests wait on a subprocess
    "ruff>=0.17,<0.18",
    "mypy>=1.10",
    "trustme>=1.0",
    "httpx>=0.27,<1",
    "wheel>=0.40",
    # Test-only oracles of the judge statistics (beameval/judges computes them itself from mergeable counts):
    "scikit-learn>=1.5",  # cohen_kappa_score
    "krippendorff>=0.8",  # krippendorff.alpha
    "statsmodels>=0.14",  # cohens_kappa's Fleiss-Cohen-Everitt interval
    "ppi-python>=0.2.3",  # ppi_mean_ci (Angelopoulos et al. 2023)
    # the test oracle of the retrieval metrics (trec_eval's own code); the metrics themselves are pure Python
    "pytrec-eval-terrier>=0.5.6",
]

setup(
    name="beam-llm-evaluator",
    version="0.1.0",
    description="LLM evaluation pipeline on Apache Beam: prompts, inference, metrics, aggregate statistics.",
    python_requires=">=3.10",
    packages=find_packages(include=["beameval*", "pipeline*", "transforms*"]),
    install_requires=[
        "apache-beam==2.77.0",
        "aiohttp>=3.13,<4",
        "pydantic>=2.7,<3",
        "jinja2>=3.1",
        "pyyaml>=6",
        "pyarrow>=14,<26",
        "sacrebleu>=2.4,<3",
        "rouge-score==0.1.2",
        "nltk>=3.8",
        "jsonpath-ng>=1.6",
        "jsonschema>=4",
        "scipy>=1.10",  # distribution quantiles for the confidence intervals (beameval/stats/intervals.py)
        # and the paired tests of run comparisons (beameval/compare/: t, exact binomial)
        "tqdm>=4.66,<5",  # the run's progress bar on a terminal
        "orjson>=3.10,<4",  # the response store's lines read ~3x faster than json (beameval/cache/entry.py)
        "redis>=5,<9",  # rate_limit.shared: one request and token budget for every worker, kept in Redis (GCRA script)
    ],
    # One console command for every entry point (beameval run|compare|cache|history|report): unlike
    # `python -m pipeline.run`, it is not shadowed by a pipeline.py in the working directory.
    entry_points={"console_scripts": ["beameval = pipeline.console:main"]},
    # Not "build/": a folder of that name in the project root shadows PyPA's `build`, which Beam
    # runs (python -m build) to stage the project for Dataflow with --setup_file.
    options={"build": {"build_base": ".setuptools-build"}},
    extras_require={
        "test": TEST,
        "dev": TEST,
        "gcp": ["apache-beam[gcp]==2.77.0"],
        "aws": ["apache-beam[aws]==2.77.0"],
    },
)
