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

# One torch thread per worker (two workers on two cores: more threads only contend); a file's tests in one
# worker, so a module-scoped fixture (an end-to-end campaign) is built once; files go out in tests/conftest.py's
# order (longest first), not xdist's (most tests first).
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q tests

clean:
	rm -rf $(VENV) .formloop
