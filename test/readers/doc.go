// Package readers proves that what this project writes into engine Pods is accepted by the
// released engines' own configuration readers, not by a model of them: vLLM's
// MooncakeStoreConfig loader, KVTransferConfig and --kv-cache-dtype choices, SGLang's mooncake
// store loader and its real ServerArgs argparse, and vLLM-Ascend's MooncakeBackend. hack/readers.sh
// fetches those releases from PyPI; harness.py runs their code in isolation (no torch, no
// accelerator) over one container; the tests feed it every injected container of the inject
// goldens and every cache-attached container of the ModelDeployment goldens, and prove the
// harness can fail.
package readers
