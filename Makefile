# gpushare — build, test and benchmark targets. `make help` lists them.
GO      ?= go
BIN     ?= bin
PKGS    ?= ./...
export CGO_ENABLED ?= 1
# One compile of the dependencies for every plain build make test does (vet, the test/ module, the
# e2e suite's programs, the image's device plugin): all -trimpath, all with the cgo flags the image
# uses (go-nvml's deprecation warnings silenced). A cold run then compiles the shared Kubernetes
# libraries once per flavour (plain, -race, fuzz-instrumented, static) instead of once per build.
export GOFLAGS    := $(strip $(GOFLAGS) -trimpath)
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Test binaries are linked without DWARF (stack traces and race reports need none): a link takes
# ~40 % less CPU, and make test links some sixty of them. TESTLDFLAGS= keeps DWARF for a debugger.
TESTLDFLAGS ?= -w

.PHONY: gpu-proof gpu-proof-build
.PHONY: help build test docs-check vet lint fmt-check tidy-check size-check unit bench image chart-check cluster-binaries kueue container-lane e2e playground playground-down playground-check docs-run bench-packing bench-packing-gib bench-burst

help: ## list targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Binaries: name=package. A program not written yet is skipped.
BINARIES = gpushare-scheduler=./scheduler gpushare-device-plugin=./deviceplugin kubectl-inspect-gpushare=./inspector

build: ## build every binary into ./bin
	@mkdir -p $(BIN); for b in $(BINARIES); do name=$${b%%=*}; pkg=$${b#*=}; \
	  if [ -f $$pkg/main.go ]; then echo "go build -o $(BIN)/$$name $$pkg"; $(GO) build -o $(BIN)/$$name $$pkg || exit 1; fi; done

vet: ## go vet
	$(GO) vet $(PKGS)

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy-check: ## fail if go mod tidy would change go.mod/go.sum (product module and test/ module)
	$(GO) mod tidy -diff
	cd test && $(GO) mod tidy -diff

size-check: ## no product Go file or chart template over 500 lines; the shipped programs' Go within 28,000 lines (prints it)
	hack/size-check.sh

lint: vet fmt-check tidy-check size-check ## vet, gofmt, go mod tidy and size checks

unit: ## unit tests with the race detector
	$(GO) test -race -count=1 -ldflags='$(TESTLDFLAGS)' $(PKGS)

chart-check: ## helm lint + render matrix + refusals of contradictory values + the env the programs read (builds helm once into the cache)
	hack/chart-check.sh

test: k8s-prebuild lint unit fuzz-short chart-check playground-check docs-check docs-run image-check-amd64 e2e e2e-oldest ## the test command CI runs: the Kubernetes binaries started building in the background (k8s-prebuild), lint, unit tests (-race), every fuzz target for 3s, Helm chart checks, playground script checks, docs check, the docs' commands run on a playground of their own, the image built twice to one digest, end-to-end (the install lane included) on the current Kubernetes and the smoke + container lanes on the oldest (root)

docs-check: ## every make target, program flag, metric and annotation key README.md and docs/ name exists; the flag defaults, chart policies, Kubernetes versions and links they state are right; docs/*.md within 3,000 lines and CHANGELOG.md within 250 (and the check catches a doc that breaks each rule)
	hack/docs-check.sh

# Go native fuzz targets, PACKAGE:TARGET. `make unit` already runs each one's seed corpus
# (f.Add seeds and testdata/fuzz/TARGET/); `make fuzz` mutates beyond it for FUZZTIME per
# target, `make fuzz-short` (part of `make test`) for FUZZSHORT. A failure writes the input
# to the package's testdata/fuzz/TARGET/: commit it with the fix, it is then a seed.
# What costs is building and linking a package's instrumented test binary, not the fuzzing:
# each package is built once into $(FUZZBIN) (`go test -c -fuzz`, not relinked while up to
# date) and its targets run from it, with the corpus cache `go test -fuzz` uses.
FUZZ_TARGETS = api:FuzzDecodeAssignment api:FuzzDecodeInventory api:FuzzParseIsolation \
  api:FuzzParseIsolationFile api:FuzzParseUnitID api:FuzzRequestFromPod api:FuzzCardChoice scheduler/server:FuzzExtenderVerbs scheduler/server:FuzzDecodeArgs \
  deviceplugin/plugin:FuzzAllocate inspector/inspect:FuzzViewOfMalformedAnnotations
FUZZTIME ?= 30s
FUZZSHORT ?= 3s
FUZZBIN  ?= $(BIN)/fuzz
.PHONY: fuzz fuzz-short
fuzz: ## run every fuzz target for FUZZTIME (default 30s) each
	@mkdir -p $(FUZZBIN); cache=$$($(GO) env GOCACHE)/fuzz/$$($(GO) list -m); built=; \
	for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t#*:}; bin=$(abspath $(FUZZBIN))/$$(echo $$pkg | tr / _).test; \
	  case " $$built " in *" $$pkg "*) ;; *) echo "go test -c -fuzz . -o $$bin ./$$pkg"; \
	    $(GO) test -c -fuzz . -ldflags='$(TESTLDFLAGS)' -o $$bin ./$$pkg || exit 1; built="$$built $$pkg";; esac; \
	  echo "$$name ($$pkg) for $(FUZZTIME)"; \
	  (cd $$pkg && $$bin -test.run '^$$' -test.fuzz "^$$name\$$" -test.fuzztime $(FUZZTIME) \
	    -test.fuzzcachedir $$cache/$$pkg) || exit 1; done

fuzz-short: ## run every fuzz target for FUZZSHORT (default 3s) each: part of `make test`
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORT)

# -cpu 1 gives the one-core figures the targets are stated in; -cpu 2 shows --parallelism at work.
BENCHCPU ?= 1,2
bench: ## Go benchmarks: filter/prioritize at 100-5,000 nodes, policies, Allocate matching, inspector (figures printed; no pass/fail on speed)
	$(GO) test -run '^$$' -bench . -benchmem -cpu $(BENCHCPU) $(PKGS)

# Packing quality: replay Alibaba's openb traces (docs/packing.md).
# TRACES: the traces folder (default: the subset shipped in the repository, the default workload);
# VARIANTS=all replays the anchor's 17 workloads (needs the full openb/ folder in TRACES)
# POLICIES: comma-separated (default: all).
TRACES   ?= scheduler/simulate/traces
VARIANTS ?= default
POLICIES ?=
bench-packing-gib: ## replay the heterogeneous GiB workload (traces/gib, from openb) for every policy, all nodes and kube-scheduler's adaptive sample
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpushare-simulate ./scheduler/simulate
	for nts in 100 0; do echo "percentageOfNodesToScore $$nts:"; $(BIN)/gpushare-simulate -memory-nodes $(TRACES)/gib/openb_gib_nodes.csv -memory-pods $(TRACES)/gib/openb_gib_pods.csv $(if $(POLICIES),-policies $(POLICIES)) -nodes-to-score $$nts -quiet | tail -3; done

# What kube-scheduler's percentageOfNodesToScore costs in packing (docs/packing.md): a generated
# workload (SYNTH=FLEET/REQUESTS: fleets mixed, inference, training; requests mixed, small, large), each
# setting of CURVE against every node on the same workload, per seed. 5,000 nodes × 10 seeds is ~6 minutes
# on 16 cores; SYNTH_NODES=15000 takes hours of CPU.
SYNTH       ?= mixed/mixed
SYNTH_NODES ?= 1000,5000
SYNTH_SEEDS ?= 10
CURVE       ?= 0,10,25,50,100
.PHONY: bench-sampling
bench-sampling: ## packing cost and replay rate of percentageOfNodesToScore CURVE (0,10,25,50,100) against every node, frag, generated GiB workload SYNTH at SYNTH_NODES (1000,5000), SYNTH_SEEDS seeds
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpushare-simulate ./scheduler/simulate
	$(BIN)/gpushare-simulate -synthetic $(SYNTH) -nodes $(SYNTH_NODES) -seeds $(SYNTH_SEEDS) -curve $(CURVE) -policies $(or $(POLICIES),frag) -quiet

bench-packing: ## replay the openb traces for every policy, table beside the FGD anchor (VARIANTS=all for 17)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpushare-simulate ./scheduler/simulate
	$(BIN)/gpushare-simulate -traces $(TRACES) -workloads $(VARIANTS) $(if $(POLICIES),-policies $(POLICIES)) -png $(BIN)/packing-curves.png -quiet

# Images: no container engine needed (hack/image.sh, docs/install.md "Images"). IMAGE is the
# reference the archive names (default: the chart's repository and appVersion); PUSH=registry/repo:tag
# also pushes it.
IMAGE     ?=
PLATFORMS ?= linux/amd64 linux/arm64
PUSH      ?=
IMAGE_OUT ?= $(BIN)/image
.PHONY: image image-base-update image-check image-check-amd64
image: ## the gpushare image for linux/amd64 and linux/arm64 as an OCI archive in bin/image/gpushare.oci.tar (digests and sizes printed; PUSH=registry/repo:tag pushes)
	IMAGE=$(IMAGE) PLATFORMS="$(PLATFORMS)" PUSH=$(PUSH) IMAGE_OUT=$(IMAGE_OUT) GO=$(GO) hack/image.sh

# A release from this tree (hack/release.sh, docs/install.md): PUSH=registry/path gets the image as
# PUSH/gpushare:<appVersion> and the chart as oci://PUSH/charts/gpushare, the chart's default
# image.repository set to PUSH/gpushare.
RELEASE_OUT ?= $(BIN)/release
.PHONY: release
release: ## publish a release: the image (PLATFORMS) to PUSH/gpushare:<appVersion> and the chart to oci://PUSH/charts/gpushare, whose default image is the one pushed (PUSH=registry.example.com/gpushare; docker login and helm registry login first)
	PUSH=$(PUSH) PLATFORMS="$(PLATFORMS)" RELEASE_OUT=$(RELEASE_OUT) GO=$(GO) hack/release.sh

image-check-amd64: ## image-check for linux/amd64 (part of `make test`)
	@$(MAKE) --no-print-directory image-check CHECK_PLATFORMS=linux/amd64

image-base-update: ## re-pin the image's Debian base packages (hack/image/debian.lock) to apt's current versions
	hack/image.sh update-base

# `make test` checks linux/amd64 only (CHECK_PLATFORMS): the install lane builds that platform anyway,
# so it costs a fresh machine nothing more; arm64's first build (cgo cross-compile of every dependency)
# would add ~5 minutes to a cold CI run. `make image-check CHECK_PLATFORMS="linux/amd64 linux/arm64"` checks both.
CHECK_PLATFORMS ?= $(PLATFORMS)
image-check: ## build the image twice into two folders and fail unless both give the same digests (`make test`: linux/amd64)
	@rm -rf $(BIN)/image-a $(BIN)/image-b
	@$(MAKE) --no-print-directory image IMAGE_OUT=$(BIN)/image-a PLATFORMS="$(CHECK_PLATFORMS)" > $(BIN)/image-a.txt; rc=$$?; cat $(BIN)/image-a.txt; exit $$rc
	@$(MAKE) --no-print-directory image IMAGE_OUT=$(BIN)/image-b PLATFORMS="$(CHECK_PLATFORMS)" > $(BIN)/image-b.txt
	@a=$$(grep -E 'index|sha256:' $(BIN)/image-a.txt ); b=$$(grep -E 'index|sha256:' $(BIN)/image-b.txt); \
	  if [ -z "$$a" ]; then echo "image-check: no digest printed"; exit 1; fi; \
	  if [ "$$a" != "$$b" ]; then printf 'image-check: two builds of one commit differ:\n%s\n--\n%s\n' "$$a" "$$b"; exit 1; fi; \
	  cmp -s $(BIN)/image-a/gpushare.oci.tar $(BIN)/image-b/gpushare.oci.tar || { echo "image-check: the archives differ"; exit 1; }; \
	  echo "image-check: two builds, one digest"

# End-to-end: a real control plane on 127.0.0.1 (hack/cluster.sh) and simulated GPU
# nodes (test/nodeagent, the real kubelet device manager), in the separate Go module test/.
E2E_TIMEOUT ?= 30m
# The Kubernetes version of the control plane, kubelet and kube-proxy the e2e suite builds and runs
# (`make e2e K8S_VERSION=v1.36.3` runs any served version); the oldest supported minor gets the
# smoke and container lanes in `make test` (docs/compatibility.md).
K8S_VERSION        ?= $(shell cat hack/k8s-version)
OLDEST_K8S_VERSION ?= v1.35.4
export K8S_VERSION
OLDEST_TESTS = TestSmokeNodeReadyPodScheduledAndRunning|TestExtenderPlacesPodOnPolicyCardAndContainerGetsItsMount|TestNodeAgentWithRealDeviceManager|TestContainerLane

cluster-binaries: ## build etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl into ~/.cache/gpushare (cold ~7 min on 2 idle cores, then skipped)
	hack/build-k8s.sh

kueue: ## build the Kueue controller (hack/kueue-version) and copy its CRDs into ~/.cache/gpushare for the Kueue e2e test (cold ~5 min on 2 idle cores, then skipped)
	hack/build-kueue.sh

# LANE_CONTAINERD2=1 (the default) also builds containerd 2 for the DRA lane (cached).
LANE_CONTAINERD2 ?= 1
container-lane: ## the e2e container lane's programs: containerd+runc (apt, root), containerd 2 for the DRA lane (module proxy, cached), kubelet, NVIDIA runtime + nvidia-ctk (cached)
	LANE_CONTAINERD2=$(LANE_CONTAINERD2) hack/container-lane.sh

e2e: cluster-binaries kueue container-lane ## end-to-end tests against a local control plane, the DRA lane included (root; docs/e2e.md)
	cd test && $(GO) vet ./... && GPUSHARE_E2E=1 GPUSHARE_E2E_DRA_LANE=1 $(GO) test -count=1 -ldflags='$(TESTLDFLAGS)' -timeout $(E2E_TIMEOUT) ./...

.PHONY: e2e-oldest k8s-prebuild
k8s-prebuild: ## start building the Kubernetes binaries of K8S_VERSION, Kueue and OLDEST_K8S_VERSION in the background at the lowest priority (first step of `make test`; log bin/k8s-prebuild.log; `hack/k8s-prebuild.sh stop` stops it)
	@OLDEST_K8S_VERSION=$(OLDEST_K8S_VERSION) hack/k8s-prebuild.sh start

e2e-oldest: ## the smoke and container lanes on the oldest supported Kubernetes (OLDEST_K8S_VERSION, default v1.35.4; root)
	$(MAKE) --no-print-directory cluster-binaries container-lane K8S_VERSION=$(OLDEST_K8S_VERSION) LANE_K8S_BINARIES=kubelet LANE_CONTAINERD2=0
	cd test && K8S_VERSION=$(OLDEST_K8S_VERSION) GPUSHARE_E2E=1 $(GO) test -count=1 -ldflags='$(TESTLDFLAGS)' -timeout $(E2E_TIMEOUT) -run '^($(OLDEST_TESTS))$$' ./e2e/

# KEEP=1 resumes the last playground; CLEAN=1 deletes its state on the way down.
KEEP  ?= 0
CLEAN ?= 0
playground: ## a FRESH local cluster + the chart's policies, RBAC and record key + extender + 3 simulated GPU nodes + docs/examples (root; KEEP=1 resumes the last one, old pods included; NODE_SCOPE=1: plugins read through the node-scope webhook instead of their node's identity; CONTAINER_RECORDS=0: the node agents skip the e2e-containers record, a write per pod a kubelet does not make (for bench-burst); ports: GPUSHARE_*_PORT; first run builds Kubernetes, ~7 min on 2 idle cores)
	GPUSHARE_PLAYGROUND_KEEP=$(KEEP) GPUSHARE_PLAYGROUND_NODE_SCOPE=$(NODE_SCOPE) GPUSHARE_PLAYGROUND_CONTAINER_RECORDS=$(or $(CONTAINER_RECORDS),1) hack/playground.sh up

playground-down: ## stop every playground process, also ones started by hand (state kept for KEEP=1; CLEAN=1 deletes it)
	hack/playground.sh down $(if $(filter 1,$(CLEAN)),--clean)

docs-run: ## run every command README.md and docs/*.md give (```sh and ```console blocks) on a fresh playground of its own (GPUSHARE_*_PORT off the default's; taken down after), failing with the doc's file:line; commands that cannot run there are excused in the doc's source (<!-- docs-run: skip: ... -->, hack/docsrun) (root)
	hack/docs-run.sh

playground-check: ## checks of hack/playground.sh that need no cluster: port preflight, fresh/keep, down finding hand-started processes, the chart's policies, identities and record key in use (root)
	hack/playground-check.sh

# The chaos run (docs/e2e.md, "The chaos run"): SEED picks the operation sequence (default: the
# clock, printed; the same SEED replays the same sequence), OPS how many operations; KEEP_GOING=1
# records every violation instead of stopping at the first. `make e2e` runs TestChaos's short default
# (seed 1, 200 operations).
SEED          ?= $(shell date +%s)
OPS           ?= 2000
KEEP_GOING    ?=
CHAOS_TIMEOUT ?= 3h
.PHONY: chaos
chaos: cluster-binaries ## chaos run on the e2e harness: seeded random operations and restarts, invariants after each (SEED=n OPS=2000 KEEP_GOING=1 PLUGIN_PODS=0 STANDBY=0 CHAOS_LOG=file; root)
	cd test && GPUSHARE_E2E=1 $(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' -v ./e2e/ \
	  -args -chaos.seed=$(SEED) -chaos.ops=$(OPS) $(if $(KEEP_GOING),-chaos.keep-going) $(if $(filter 0,$(PLUGIN_PODS)),-chaos.plugin-pods=false) $(if $(filter 0,$(STANDBY)),-chaos.standby=false) $(if $(CHAOS_LOG),-chaos.log=$(abspath $(CHAOS_LOG)))

# The device plugin against the real kubelet device manager (test/devicemanager): the test
# re-runs itself in a private mount namespace (unshare -m, tmpfs on /var/lib); needs root.
# Scheduling throughput (docs/design.md "Scheduling throughput"): a local control plane,
# N API-object GPU nodes × 8 cards of 80 GiB, P pods of 8 GiB created at once by CLIENTS;
# (a) kube-scheduler alone, (b) with the extender per policy (POLICIES, comma-separated;
# default all five). BASELINE=path/to/another/gpushare-scheduler runs each policy through it
# first ("POLICY-before"), for a before/after table from one invocation. ALL_NODES=1 runs each policy
# again with kube-scheduler scoring every node, percentageOfNodesToScore: 100 ("POLICY-all-nodes"). Not part of `make test`.
N        ?= 1000
P        ?= 2000
CLIENTS  ?= 32
ALL_POLICIES   := binpack,spread,bestfit,fgd,frag
BENCH_TIMEOUT  ?= 5m
.PHONY: bench-scheduling
bench-scheduling: cluster-binaries ## scheduling throughput, kube-scheduler alone vs with the extender per policy (N=1000 P=2000 CLIENTS=32 POLICIES=all BENCH_TIMEOUT=5m BASELINE= ALL_NODES=1 PLAIN_ALL_NODES=0 SCHED_QPS=1000: kube-scheduler's and the extender's API client budget, the same in every run)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpushare-scheduler ./scheduler
	cd test && $(GO) build -o ../$(BIN)/gpushare-schedbench ./schedbench/cmd
	$(BIN)/gpushare-schedbench -extender $(BIN)/gpushare-scheduler -nodes $(N) -pods $(P) -clients $(CLIENTS) -policies '$(or $(POLICIES),$(ALL_POLICIES))' -timeout $(BENCH_TIMEOUT) -scheduler-qps $(or $(SCHED_QPS),1000) $(if $(BASELINE),-baseline $(BASELINE)) $(if $(filter 1,$(ALL_NODES)),-all-nodes) $(if $(filter 0,$(PLAIN_ALL_NODES)),-plain-all-nodes=false)

# Time to a running pod in a burst (docs/benchmarks.md, "Time to a running pod"): on the playground
# (`make playground CONTAINER_RECORDS=0` first), bursts one after the other, each created at once by
# BURST_CLIENTS and deleted gracefully before the next: PODS pods without a GPU request alone, PODS
# pods asking GIB of a do-nothing device plugin (the device floor, not judged), PODS GPU pods of GIB
# GiB alone, and PODS of both kinds interleaved; per burst and kind create→bound→Ready p50/p90/max and
# first create→last Ready, and "met" only when every pod is Ready and the GPU-alone p90 and both mixed
# p90s are ≤ 1.2× the no-GPU-alone p90 (exit 1 otherwise), each ratio taken within its round and judged by
# its median over ROUNDS rounds (default 3: one burst's p90 ratio moves by half between suites). Not part of `make test`.
PLAYGROUND_KUBECONFIG ?= /tmp/gpushare-playground/kubeconfig
bench-burst: ## time to Ready in bursts on the playground: no-GPU alone, the device floor (a do-nothing device plugin the bench serves; not judged), GPU alone, mixed; "met" when all Ready and GPU/mixed p90 ≤ 1.2× no-GPU alone (make playground CONTAINER_RECORDS=0 first: with the agents' container records nothing is judged; ROUNDS=3 suites, each ratio judged by its median; PODS=100 GIB=3 BURST_CLIENTS=16 BURST_TIMEOUT=5m; a burst the nodes cannot hold is refused)
	@mkdir -p $(BIN)
	cd test && $(GO) build -o ../$(BIN)/gpushare-burstbench ./burstbench/cmd
	$(BIN)/gpushare-burstbench -kubeconfig $(PLAYGROUND_KUBECONFIG) -pods $(or $(PODS),100) -gib $(or $(GIB),3) -clients $(or $(BURST_CLIENTS),16) -timeout $(or $(BURST_TIMEOUT),5m) -rounds $(or $(ROUNDS),3)

# The same bursts (the device floor too; the DRA variant's: a do-nothing DRA driver) on the container lane's real node (kubelet, containerd, runc through NVIDIA's
# runtime), then on the DRA lane's node (GPU pods with claims of the gpushare DeviceClass, containerd 2):
# PODS pods a burst (default 15: what the lane's two 40 GiB cards hold at 4 GiB, with room); PLUGIN_ARGS adds plugin flags.
.PHONY: bench-burst-lane
bench-burst-lane: cluster-binaries container-lane ## bench-burst on the container lane's real kubelet node and its DRA variant, whose floor is a do-nothing DRA driver (root; PODS=15 ROUNDS=3 PLUGIN_ARGS="--kube-api-qps=5 --kube-api-burst=10")
	cd test && GPUSHARE_E2E=1 GPUSHARE_BENCH_BURST_LANE=1 GPUSHARE_E2E_DRA_LANE=1 GPUSHARE_BENCH_PODS=$(or $(PODS),15) GPUSHARE_BENCH_ROUNDS=$(or $(ROUNDS),3) GPUSHARE_BENCH_PLUGIN_ARGS='$(PLUGIN_ARGS)' $(GO) test -count=1 -ldflags='$(TESTLDFLAGS)' -timeout 40m -run '^TestBurstBench(DRA)?OnARealKubelet$$' -v ./e2e/

# The DRA lane (docs/e2e.md, docs/dra.md): gpushare's node agent as a DRA driver on the container
# lane's real kubelet, with containerd 2 (built from the Go module proxy into the cache on first use)
# applying the claims' CDI devices. Not part of `make test`: its cold build and run cost more than
# the 3 minutes it may add there.
.PHONY: e2e-dra-lane
e2e-dra-lane: cluster-binaries ## the DRA lane: claims sharing a card on a real kubelet with containerd 2 and NVIDIA's runtime in CDI mode, kubelet and driver restarts (root; first run builds containerd v2.4.2, ~2.5 min)
	LANE_CONTAINERD2=1 hack/container-lane.sh
	cd test && GPUSHARE_E2E=1 GPUSHARE_E2E_DRA_LANE=1 $(GO) test -count=1 -ldflags='$(TESTLDFLAGS)' -timeout $(E2E_TIMEOUT) -run '^TestDRALane$$' -v ./e2e/

.PHONY: test-devicemanager
test-devicemanager: ## device plugin + real kubelet device manager: registration, Allocate, kubelet restart (root)
	cd test && $(GO) test -race -count=1 -v -run . ./devicemanager/

# The proof on a real GPU (docs/hardware.md): bin/gpu-proof is built here (cgo) and carried to a
# machine with the NVIDIA driver and nothing else (no toolkit, Kubernetes or network); there
# `make gpu-proof` runs the carried binary (where Go is, it rebuilds first). NVML=spec:2x80GiB:NVIDIA-H100 dry-runs it on the simulated NVML.
NVML ?= real
gpu-proof-build: ## build bin/gpu-proof, the real-GPU proof (always rebuilds)
	@mkdir -p $(BIN)
	cd test && $(GO) build -ldflags "-s -w" -o ../$(BIN)/gpu-proof ./gpuproof

gpu-proof: ## run the real-GPU proof: discovery, per-process memory, kill enforcement, XID events, MPS limit, DRA, NVIDIA runtime mount rule, versions (root; NVML=spec:... dry-runs it)
	@if command -v $(GO) >/dev/null; then $(MAKE) --no-print-directory gpu-proof-build; \
	  else echo "no Go toolchain: running the carried $(BIN)/gpu-proof"; fi
	$(BIN)/gpu-proof --nvml $(NVML)
