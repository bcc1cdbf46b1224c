# crashloop: virt-launcher, the KubeVirt crash-loop controller, and their suites.
# `make run` and `make test` do all the set-up on a fresh Debian 12 machine (as root).

SHELL := /bin/bash
GO ?= go
BUILD := _build
BIN := $(BUILD)/bin
# cluster-lite's upstream components (etcd, kube-apiserver, KubeVirt's
# virt-controller and virt-api), each built in its own module under tools/.
CLUSTERLITE_BIN := $(BUILD)/clusterlite/bin
IMAGES := $(BUILD)/images
# libbtrfs-dev: headers only, for containers/storage's btrfs driver that
# pkg/containerdisk links (no library is linked, and no build tag is needed).
DEB_PACKAGES := qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-system \
	libvirt-clients libvirt-dev libbtrfs-dev busybox-static cpio pkg-config iproute2 xorriso ovmf swtpm swtpm-tools
# the launcher image's tools (make image only): container tools, debootstrap, and setcap (libcap2-bin) for
# the monitor's file capability
IMAGE_DEB_PACKAGES := buildah podman skopeo runc slirp4netns uidmap catatonit debootstrap libcap2-bin
# What the image builds need beyond DEB_PACKAGES: jq writes images.json; the
# cloud guest is debootstrapped, its disk assembled from files (ext4, FAT with
# mtools, GPT with sfdisk, GRUB for BIOS and EFI) and packed by buildah.
GUEST_DEB_PACKAGES := jq
CLOUD_GUEST_DEB_PACKAGES := jq debootstrap e2fsprogs dosfstools mtools fdisk grub-common grub-pc-bin \
	grub-efi-amd64-bin qemu-utils buildah
# make fuzz runs every fuzz target of the repo (each `func FuzzX` of a
# _test.go file git knows, found anew on every run, so a new target cannot be
# left out), one after another, FUZZ_EXECS runs each unless FUZZ_EXECS_<X>
# sets its own (make fuzz FUZZ_EXECS_FuzzConvert=1000x; FUZZ_ONLY=FuzzConvert
# runs only the targets named). Budgets are execution counts, not durations:
# with a duration, Go 1.26's fuzz coordinator can report its own deadline as a
# failure ("context deadline exceeded", no input written; golang/go#75804,
# fixed in Go 1.27), which a loaded machine hits. The overrides even out the
# targets' speeds (FuzzConvertFields and FuzzCloudInit start a stand-in tool
# per run; FuzzReadPlan does 25000 runs a second), so that each takes 10 to
# 30 s and the whole of make fuzz about 3 minutes on this 2-core machine.
FUZZ_EXECS ?= 50000x
FUZZ_EXECS_FuzzParse ?= 120000x
FUZZ_EXECS_FuzzVMI ?= 60000x
FUZZ_EXECS_FuzzReadPlan ?= 300000x
FUZZ_EXECS_FuzzParseEvent ?= 300000x
FUZZ_EXECS_FuzzParseManifests ?= 100000x
FUZZ_EXECS_FuzzParseRecord ?= 100000x
FUZZ_EXECS_FuzzConvertFields ?= 5000x
FUZZ_EXECS_FuzzCloudInit ?= 4000x
FUZZ_ONLY ?=
# make herd: herd sizes, real minutes per run and controllers (bench/herd)
HERD_VMS ?= 50 100 200 500
HERD_MINUTES ?= 10
HERD_CONTROLLERS ?= kubevirt,ours
# make herd HERD_RUNTIME=podman: cluster-lite's launcher pods as podman containers (needs make image) instead of bare processes
HERD_RUNTIME ?= process
# make storm: a few real VMs failing STORM_FAIL_AFTER after they are ready
STORM_VMS ?= 2
STORM_MINUTES ?= 3
STORM_FAIL_AFTER ?= 5s
STORM_FAIL_SOON ?= 1m
FUNCTEST_FLAGS ?=
# make image LIBVIRT_PAIR=backports: the launcher image with bookworm-backports' libvirt 11.3 and QEMU 10.0,
# tagged :backports (the default, debian, is Debian 12's libvirt 9.0 and QEMU 7.2, which the suites use)
LIBVIRT_PAIR ?= debian
# make bench BACKPORTS=1: the start rows also on the backports root's libvirt and QEMU (make backports-root)
BACKPORTS ?=
BACKPORTS_ROOT := $(BUILD)/backports-root
# make clusterlite KUBEVIRT_VERSION=vX.Y.Z or KUBEVIRT_SRC=DIR builds another KubeVirt (tools/clusterlite/build.sh).
KUBEVIRT_VERSION ?=
KUBEVIRT_SRC ?=
# make clusterlite VIRT_HANDLER=1 also builds KubeVirt's virt-handler and virt-chroot, for clusterlite up
# --node-side virt-handler; make test builds them (about 20 s cold) so the cluster lane's [virt-handler] specs run
# (tools/clusterlite/kubevirt/VIRT-HANDLER.md)
VIRT_HANDLER ?=

KVRENDER := $(BUILD)/kvrender/kvrender

.PHONY: all deps image-deps image backports-root images guest-image cloud-image build kubevirtmode clusterlite kvrender cluster-up run run-launcher test unit functest functest-suite fuzz lint bench bench-smoke herd storm clean

all: build

## deps: install the Debian packages the build and the VMs need, when missing
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-o Dpkg::Options::=--force-confnew $$missing >/dev/null; \
	fi

## image-deps: install the container tools that `make image` needs, when missing
image-deps: deps
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(IMAGE_DEB_PACKAGES)"

## image: the virt-launcher container image localhost/crashloop/virt-launcher:latest (buildah, Debian
## packages only, the binary from `make build`); reused when its inputs did not change
image: image-deps build kubevirtmode
	LIBVIRT_PAIR=$(LIBVIRT_PAIR) images/launcher/build.sh $(BIN) $(BUILD)

## backports-root: Debian bookworm with bookworm-backports' libvirt 11.3 and QEMU 10.0 in _build/backports-root
##   (debootstrap, about a minute), for the launcher's local path on that pair (images/backports-root/enter.sh)
##   and `make bench BACKPORTS=1`; the host's own libvirt and QEMU are not touched. Not part of make test.
backports-root: image-deps
	images/backports-root/build.sh $(BACKPORTS_ROOT)

## images: both guests into _build/images (each reused when its recipe is unchanged)
images: guest-image cloud-image

## guest-image: the test guest (Debian kernel + busybox initramfs), seconds
guest-image: deps
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(GUEST_DEB_PACKAGES)"
	@images/guest/build.sh $(IMAGES)

## cloud-image: the cloud guest (Debian 12, cloud-init, BIOS+EFI) as a KubeVirt containerDisk OCI archive, minutes cold
cloud-image: deps
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(CLOUD_GUEST_DEB_PACKAGES)"
	@images/cloud-guest/build.sh $(IMAGES)

## build: the binaries, into _build/bin
build: deps
	$(GO) build -o $(BIN)/ ./cmd/...
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/virt-launcher ./cmd/virt-launcher-convert

## kubevirtmode: the launcher image's KubeVirt-mode entry points (virt-launcher-monitor, KubeVirt's virt-tail and
##   container-disk), the launcher's instancetype expander (virt-launcher-expand) and hook sidecar runner
##   (virt-launcher-hooks, with KubeVirt's sidecar-shim and smbios hook) into _build/bin; a module of its
##   own with KubeVirt's pins, so `make run` does not wait for it
kubevirtmode: deps
	GO=$(GO) kubevirtmode/build.sh $(BIN)

## clusterlite: build etcd, kube-apiserver and KubeVirt's virt-controller/virt-api from Go modules (tools/clusterlite);
##   KUBEVIRT_VERSION=vX.Y.Z: another KubeVirt release, into _build/clusterlite/kubevirt-vX.Y.Z/bin;
##   KUBEVIRT_SRC=DIR: a local KubeVirt checkout, into _build/clusterlite/kubevirt-src/bin;
##   VIRT_HANDLER=1: also KubeVirt's virt-handler and virt-chroot
clusterlite: deps
	KUBEVIRT_VERSION='$(KUBEVIRT_VERSION)' KUBEVIRT_SRC='$(KUBEVIRT_SRC)' VIRT_HANDLER='$(VIRT_HANDLER)' \
		tools/clusterlite/build.sh $(CLUSTERLITE_BIN)

## kvrender: KubeVirt v1.6.0's own defaults, instancetype expansion and converter as one program (tools/kvrender,
##   a module of its own), the reference side of the differential in pkg/kvdiff; after clusterlite, whose KubeVirt
##   build compiles all but 14 of its packages, so that it mostly reuses the build cache
kvrender: clusterlite
	cd tools/kvrender && $(GO) build -o $(CURDIR)/$(KVRENDER) .

## cluster-up: a one-node KubeVirt in a network namespace of its own, in the foreground (Ctrl-C tears it down); prints NETNS= (nsenter --net=) and KUBECONFIG=
cluster-up: build images clusterlite
	$(BIN)/clusterlite up

## run: the main job: a real VM through a crash loop (3 real QEMU start failures) and its recovery
run: build guest-image
	examples/demo.sh

## run-launcher: boot the example VMI through virt-launcher and show its phases
run-launcher: build guest-image
	$(BIN)/virt-launcher --event-format text --log-level warn examples/vmi-testguest.yaml

## test: unit tests, a short fuzz run, lint, the functional suites on real VMs and the benchmark smoke.
## Every Debian package is installed first in one apt run, then the artefacts are built
## concurrently (Go builds beside debootstraps), then the checks run one after another.
test:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(sort $(DEB_PACKAGES) $(GUEST_DEB_PACKAGES) $(CLOUD_GUEST_DEB_PACKAGES) $(IMAGE_DEB_PACKAGES))"
	@$(MAKE) --no-print-directory -j3 build images clusterlite VIRT_HANDLER=1
	@# after clusterlite: KubeVirt's packages are then in the build cache, which kvrender and kubevirtmode reuse
	@$(MAKE) --no-print-directory -j2 kvrender image
	@$(MAKE) --no-print-directory unit fuzz lint functest bench-smoke

unit: deps clusterlite kvrender kubevirtmode
	CLUSTERLITE_BIN_DIR=$(CURDIR)/$(CLUSTERLITE_BIN) KVRENDER=$(CURDIR)/$(KVRENDER) \
		VIRT_LAUNCHER_EXPAND=$(CURDIR)/$(BIN)/virt-launcher-expand VIRT_LAUNCHER_HOOKS=$(CURDIR)/$(BIN)/virt-launcher-hooks \
		$(GO) test -count=1 ./pkg/... ./cmd/... ./internal/...
	cd kubevirtmode && VIRT_LAUNCHER_HOOKS=$(CURDIR)/$(BIN)/virt-launcher-hooks \
		$(GO) test -count=1 ./monitor/... ./vmexpand/... ./handlerside/... ./hooksidecar/... ./cmd/...

## fuzz: every fuzz target of the repo with its execution budget (FUZZ_EXECS, FUZZ_EXECS_<target>); all run,
##   then the failed ones are listed (their inputs are in the package's testdata/fuzz/<target>/)
fuzz: deps
	@$(foreach v,$(filter FUZZ_EXECS_%,$(.VARIABLES)),export $(v)='$($(v))';) \
	failed=; for hit in $$(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/' | sort); do \
		file=$${hit%%:*}; name=$${hit##*:}; dir=$$(dirname $$file); \
		if [ -n "$(FUZZ_ONLY)" ] && ! [[ " $(FUZZ_ONLY) " == *" $$name "* ]]; then continue; fi; \
		mod=$$dir; while [ "$$mod" != . ] && [ ! -f $$mod/go.mod ]; do mod=$$(dirname $$mod); done; \
		var=FUZZ_EXECS_$$name; budget=$${!var:-$(FUZZ_EXECS)}; start=$$SECONDS; \
		echo "=== fuzz $$name in ./$$dir, $$budget"; \
		rel=$${dir#$$mod}; \
		(cd $$mod && $(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$$budget ./$${rel#/}) || failed="$$failed $$name(./$$dir)"; \
		echo "=== fuzz $$name: $$((SECONDS - start)) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "=== fuzz targets that failed:$$failed"; exit 1; fi

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@set -e; for m in tools/clusterlite/*/ tools/kvrender/ kubevirtmode/; do (cd $$m && $(GO) vet ./...); done
	cd kubevirtmode && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

## functest: the ginkgo suites on real VMs (the image suite runs the launcher image, the KubeVirt-mode
##   conformance suite drives it with virt-handler's own client code); one JUnit file per suite in _build/junit/.
##   The cluster suite, most of whose time is waiting (backoffs, virt-handler's timers, the 3-minute socket
##   wait), runs beside the others; its output goes to _build/functest/cluster.log and is printed when it ends.
##   FUNCTEST_SERIAL=1 runs the suites one after another instead.
functest: build images clusterlite image
	@mkdir -p $(BUILD)/junit $(BUILD)/functest
	@rm -f $(BUILD)/functest/*.json
	@set -e; suites=$$(grep -l 'RunSpecs(' functests/*/*_test.go | xargs -n1 dirname | sort -u); \
	cluster_pid=; if [ -z "$(FUNCTEST_SERIAL)" ] && echo "$$suites" | grep -qx functests/cluster; then \
		suites=$$(echo "$$suites" | grep -vx functests/cluster); \
		echo "=== functional suite cluster: beside the others, output in $(BUILD)/functest/cluster.log, printed when it ends"; \
		rm -f $(BUILD)/functest/cluster.rc; \
		( rc=0; $(MAKE) --no-print-directory functest-suite SUITE=functests/cluster > $(BUILD)/functest/cluster.log 2>&1 || rc=$$?; \
			echo $$rc > $(BUILD)/functest/cluster.rc ) & cluster_pid=$$!; \
	fi; \
	rest=0; for suite in $$suites; do \
		$(MAKE) --no-print-directory functest-suite SUITE=$$suite || { rest=1; break; }; \
	done; \
	if [ $$rest = 0 ]; then \
		echo "=== functional suite kubevirtmode/conformance"; \
		(cd kubevirtmode && $(GO) test -v -count=1 -timeout 20m ./conformance -args -ginkgo.v -ginkgo.no-color \
			-ginkgo.junit-report=$(CURDIR)/$(BUILD)/junit/kubevirt-conformance.xml \
			-ginkgo.json-report=$(CURDIR)/$(BUILD)/functest/kubevirt-conformance.json $(FUNCTEST_FLAGS)) || rest=1; \
	fi; \
	if [ -n "$$cluster_pid" ]; then \
		echo "=== waiting for the cluster suite (pid $$cluster_pid)"; wait $$cluster_pid || true; \
		echo "=== functional suite cluster (its output)"; cat $(BUILD)/functest/cluster.log; \
		[ "$$(cat $(BUILD)/functest/cluster.rc)" = 0 ] || rest=1; \
	fi; \
	if [ $$rest != 0 ]; then echo "=== what failed (the start of each failure; the suites' reports: $(BUILD)/functest/*.json)"; \
		jq -r "$$FUNCTEST_FAILURES" $(BUILD)/functest/*.json || true; fi; \
	exit $$rest

# functest-suite: one suite, SUITE=functests/<name>
functest-suite:
	@echo "=== functional suite $(notdir $(SUITE))"
	$(GO) test -v -count=1 -timeout 40m ./$(SUITE) -args -ginkgo.v -ginkgo.no-color \
		-ginkgo.junit-report=$(CURDIR)/$(BUILD)/junit/$(notdir $(SUITE)).xml \
		-ginkgo.json-report=$(CURDIR)/$(BUILD)/functest/$(notdir $(SUITE)).json $(FUNCTEST_FLAGS)

# FUNCTEST_FAILURES is the jq program that prints, for every spec or suite
# node of a ginkgo JSON report that did not pass, its suite, its name, its
# node and place, and the first 10 lines of its failure message (400
# characters each at most), leaving out the empty fields of an API error's
# dump so that its Message, Reason and Code show: the digest
# that ends a failed `make functest`, so that the end of CI's output says
# why.
export FUNCTEST_FAILURES := .[] | .SuiteDescription as $$s | .SpecReports[]? \
	| select(.State != "passed" and .State != "skipped" and .State != "pending") \
	| "FAILED \($$s): \((["[" + .LeafNodeType + "]"] + (.ContainerHierarchyTexts // []) + [.LeafNodeText]) | map(select(. != "")) | join(" ")), \(.State) at \(.Failure.Location.FileName // "?" | split("/") | last):\(.Failure.Location.LineNumber // 0)\n\(.Failure.Message // "" | split("\n") | map(select(test("^\\s*((TypeMeta|ListMeta|SelfLink|ResourceVersion|Continue|RemainingItemCount|ErrStatus|Details)\\b|[{}],?\\s*$$)") | not)) | .[:10] | map("    " + .[:400]) | join("\n"))"

## bench: one table of launch latencies (warm, cold, as PID 1, boot) against virsh and the QEMU floor, crash path, RSS
##   (BACKPORTS=1: the start rows on Debian 12's libvirt/QEMU and on the backports root's, in turn)
bench: build images $(if $(BACKPORTS),backports-root)
	$(GO) run ./bench/launcher $(if $(BACKPORTS),-backports-root $(BACKPORTS_ROOT))

## herd: HERD_VMS fail-fast VMs under runStrategy Always on KubeVirt's virt-controller (cluster-lite) and on ours,
##   HERD_MINUTES real minutes each: retry lateness, spread, API requests, etcd growth, CPU -> _build/artifacts/herd/
herd: build images clusterlite
	flock /tmp/crashloop-suites.lock $(GO) run ./bench/herd -vms "$(HERD_VMS)" -minutes $(HERD_MINUTES) -controllers $(HERD_CONTROLLERS) \
		-launcher-runtime $(HERD_RUNTIME)

## storm: STORM_VMS real VMs whose guest panics STORM_FAIL_AFTER after it is ready, on both controllers and on ours
##   with --count-running-failures-within STORM_FAIL_SOON -> _build/artifacts/herd/storm.md
storm: build images clusterlite
	flock /tmp/crashloop-suites.lock $(GO) run ./bench/herd -scenario storm -vms "$(STORM_VMS)" -minutes $(STORM_MINUTES) \
		-controllers $(HERD_CONTROLLERS) -fail-after $(STORM_FAIL_AFTER) -fail-soon $(STORM_FAIL_SOON)

## bench-smoke: every benchmark of the repo once, in seconds (few VMs, one run per row), so none rots unnoticed
bench-smoke: build images clusterlite
	@set -e; for pkg in $$(grep -rl --include='*_test.go' '^func Benchmark' pkg cmd functests bench | xargs -n1 dirname | sort -u); do \
		echo "=== benchmarks in $$pkg (smoke)"; \
		CRASHLOOP_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -short -count=1 -run='^$$' -bench=. -benchtime=1x ./$$pkg; \
	done
	$(GO) run ./bench/launcher -smoke -launcher $(BIN)/virt-launcher -image-dir $(IMAGES)
	$(GO) run ./bench/herd -smoke -out $(BUILD)/artifacts/herd-smoke

clean:
	rm -rf $(BUILD)
