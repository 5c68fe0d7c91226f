# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the suite).
# Both create or refresh .venv first; the stamp makes the refresh a no-op when nothing changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[gpu,agent,plots,test,ray]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/formloop run gemm --shape 4096,4096,4096 --shape 64,4096,4096 --shape 1000,1000,1000
	$(BIN)/formloop optimize problems/level2/linear_bias_relu.py problems/level2/gemm_scale_clamp.py problems/level1/cumsum.py --small --budget 1 --workers 2 --out .formloop/demo-optimize

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q tests

clean:
	rm -rf $(VENV) .formloop
