package engines

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvcache-operator/kvcache/vocab"
)

// Vehicle is how configuration reaches an engine's store client.
type Vehicle string

// Vehicles.
const (
	// VehicleFile: a JSON document projected from the Pod's own annotation and named by
	// MOONCAKE_CONFIG_PATH (the vLLM family).
	VehicleFile Vehicle = "file"
	// VehicleEnvironment: variables alone (SGLang, whose reader consults the process
	// environment, so the Pod IP can come from a fieldRef).
	VehicleEnvironment Vehicle = "environment"
)

// Role is the kvcache.gpustack.ai/role of a Pod, or a ModelDeployment role's kind.
type Role string

// Roles. RoleNone is a plain server (the annotation left off; ModelDeployment's Server).
const (
	RoleNone    Role = ""
	RolePrefill Role = "Prefill"
	RoleDecode  Role = "Decode"
)

// Engine is one engine's definition.
type Engine struct {
	// Name as the kvcache.gpustack.ai/engine annotation spells it: vLLM, SGLang, vLLM-Ascend.
	Name string
	// ID as the injection record spells it: vllm, sglang, vllm-ascend.
	ID string
	// Vehicle that carries the client configuration.
	Vehicle Vehicle
	// Connector is the vLLM family's kv_connector ("" for SGLang).
	Connector string
	// ClientMode is the client-config "mode" that makes the engine a pure client of an external
	// store ("" when the reader has no mode). vLLM's reader defaults to embedded, where the engine
	// must contribute a segment and a zero global_segment_size is refused at connector start.
	ClientMode string
	// Parser is how the engine's argument parser reads long flags.
	Parser Parser
	// Program is how the engine is launched.
	Program Program
	// OwnedFlags are written by injection; a container naming one in any spelling is refused.
	// The dtype flag is owned only while the Setting model-deployment-kv-cache-dtype-owned is
	// true (see DtypeFlag).
	OwnedFlags []string
	// SourceFlags select where the engine reads its store configuration from: naming one
	// leaves every injected value unread.
	SourceFlags []string
	// SourceEnv are variables that select the mechanism or the configuration source.
	SourceEnv []string
	// InjectedEnv are the variables the engine's fragment writes over the container's own.
	InjectedEnv []string
	// OverrideEnv are variables the engine's reader prefers to the projected file's values: set
	// anywhere, they replace what the Binding configures, silently. The fragment writes them too
	// (they are in InjectedEnv), with the Binding's values, because env wins over envFrom, where
	// a ConfigMap's value would otherwise be read; a container's own declaration is refused.
	OverrideEnv []string
	// RefusedFlags are refused for another reason (RefusedFlagReasons says why).
	RefusedFlags []string
	// ConfigFileFlag names a file of options the engine's parser reads into its arguments
	// (--config, a YAML file on both engines): a key there can set any flag, the owned ones
	// included, where admission cannot see it.
	ConfigFileFlag string
	// Transports the engine's client accepts, in store spelling; nil means any single one.
	Transports []string
	// StagingBuffer is the host memory the client stages transfers in, in bytes; it is charged
	// to the container and appears in no resources field. The vLLM family is given it as
	// local_buffer_size (its readers' own defaults are GiB); SGLang's is its fixed default.
	StagingBuffer int64
	// HierarchicalCacheFlag, when set, is appended last unless the container names it (see
	// ManagedTail): SGLang's store hangs off its host-memory tier.
	HierarchicalCacheFlag string
	// Serve is how a managed deployment launches the engine on a model.
	Serve Serve
}

// Serve is how an engine's server is launched on a model: Program, then Subcommand (if any),
// then the model (after ModelFlag, or positional), then PortFlag and the port.
type Serve struct {
	Subcommand string
	ModelFlag  string
	PortFlag   string
	// DefaultPort is where the server listens (its API and its /metrics) without PortFlag.
	DefaultPort int32
}

// ServeArgv is the command and args that serve model on port.
func (e Engine) ServeArgv(model string, port int32) (command, args []string) {
	command = e.Program.argv()
	if s := e.Serve.Subcommand; s != "" {
		args = append(args, s)
	}
	if f := e.Serve.ModelFlag; f != "" {
		args = append(args, f)
	}
	return command, append(args, model, e.Serve.PortFlag, fmt.Sprint(port))
}

// ServingPort is the port a server launched with argv listens on, as the engine's parser reads
// its port flag (`--port N` or `--port=N`, the last one winning, as argparse does), or
// Serve.DefaultPort. ok is false when the flag's value is not a port (an unexpanded $(VAR),
// a missing value): the port cannot be known from the launch line.
func (e Engine) ServingPort(argv []string) (port int32, ok bool) {
	port = e.Serve.DefaultPort
	for _, i := range e.Parser.Find(argv, e.Serve.PortFlag) {
		_, value, inline := strings.Cut(argv[i], "=")
		if !inline {
			if i+1 >= len(argv) {
				return 0, false
			}
			value = argv[i+1]
		}
		p, err := strconv.ParseUint(value, 10, 16)
		if err != nil || p == 0 {
			return 0, false
		}
		port = int32(p)
	}
	return port, true
}

// Flags every engine shares.
const (
	// DtypeFlag is handed the Binding's dtype on every engine.
	DtypeFlag = "--kv-cache-dtype"
)

// vLLM-family and SGLang flag names.
const (
	kvTransferConfig       = "--kv-transfer-config"
	kvOffloadingSize       = "--kv-offloading-size"
	configFile             = "--config"
	hicacheStorageBackend  = "--hicache-storage-backend"
	hicacheExtraConfig     = "--hicache-storage-backend-extra-config"
	enableHierarchicalFlag = "--enable-hierarchical-cache"
)

// ClientModeStandalone is the vLLM reader's mode for an engine that reads and writes an
// external store and contributes no memory to it.
const ClientModeStandalone = "standalone-store"

// Staging buffers: what the vLLM family is given explicitly (the value the store's own
// reference uses), and SGLang's fixed 16 MiB, which it reads from no configuration.
const (
	VLLMStagingBuffer   = 128 << 20
	SGLangStagingBuffer = 16 << 20
)

var (
	vllmServe     = Serve{Subcommand: "serve", PortFlag: "--port", DefaultPort: 8000}
	vllmProgram   = Program{Executable: "vllm", Engine: "vLLM"}
	sglangProgram = Program{Module: "sglang.launch_server", Engine: "SGLang"}
)

// The three engines.
var (
	VLLM = Engine{
		Name: "vLLM", ID: "vllm", Vehicle: VehicleFile, Connector: "MooncakeStoreConnector",
		ClientMode:     ClientModeStandalone,
		Parser:         Parser{VLLMStyle: true, Known: VLLMKnownFlags},
		Program:        vllmProgram,
		OwnedFlags:     []string{kvTransferConfig, DtypeFlag},
		SourceEnv:      []string{vocab.ConfigPathEnv},
		InjectedEnv:    []string{vocab.ConfigPathEnv},
		RefusedFlags:   []string{kvOffloadingSize},
		ConfigFileFlag: configFile,
		StagingBuffer:  VLLMStagingBuffer,
		Serve:          vllmServe,
	}
	VLLMAscend = Engine{
		Name: "vLLM-Ascend", ID: "vllm-ascend", Vehicle: VehicleFile, Connector: "AscendStoreConnector",
		ClientMode:  ClientModeStandalone,
		Parser:      Parser{VLLMStyle: true, Known: VLLMKnownFlags},
		Program:     Program{Executable: "vllm", Engine: "vLLM-Ascend"},
		OwnedFlags:  []string{kvTransferConfig, DtypeFlag},
		SourceEnv:   []string{vocab.ConfigPathEnv},
		InjectedEnv: []string{vocab.ConfigPathEnv, vocab.MasterEnv, vocab.GlobalSegmentSizeEnv},
		// vLLM-Ascend 0.23.0.post1's MooncakeBackend reads these two over the file's
		// master_server_address and global_segment_size.
		OverrideEnv:    []string{vocab.MasterEnv, vocab.GlobalSegmentSizeEnv},
		RefusedFlags:   []string{kvOffloadingSize},
		ConfigFileFlag: configFile,
		Transports:     []string{"ascend"},
		StagingBuffer:  VLLMStagingBuffer,
		Serve:          vllmServe,
	}
	SGLang = Engine{
		Name: "SGLang", ID: "sglang", Vehicle: VehicleEnvironment,
		Parser:         Parser{Known: SGLangKnownFlags, Aliases: SGLangAliases},
		Program:        sglangProgram,
		OwnedFlags:     []string{hicacheStorageBackend, DtypeFlag},
		SourceFlags:    []string{hicacheExtraConfig},
		ConfigFileFlag: configFile,
		SourceEnv:      []string{vocab.SGLangConfigPathEnv},
		InjectedEnv: []string{vocab.TenantEnv, vocab.MasterEnv, vocab.MetadataServerEnv, vocab.ProtocolEnv, vocab.DeviceEnv,
			vocab.GlobalSegmentSizeEnv, vocab.LocalHostnameEnv},
		StagingBuffer:         SGLangStagingBuffer,
		Serve:                 Serve{ModelFlag: "--model-path", PortFlag: "--port", DefaultPort: 30000},
		HierarchicalCacheFlag: enableHierarchicalFlag,
	}
)

// All lists the engines in the order messages name them.
func All() []Engine { return []Engine{VLLM, SGLang, VLLMAscend} }

// ByName finds an engine by its annotation spelling (exact case).
func ByName(name string) (Engine, bool) {
	for _, e := range All() {
		if e.Name == name {
			return e, true
		}
	}
	return Engine{}, false
}

// ByID finds an engine by its ID, the spelling the injection record carries (vllm, sglang,
// vllm-ascend).
func ByID(id string) (Engine, bool) {
	for _, e := range All() {
		if e.ID == id {
			return e, true
		}
	}
	return Engine{}, false
}

// Names lists the annotation spellings, for messages.
func Names() []string {
	var n []string
	for _, e := range All() {
		n = append(n, e.Name)
	}
	return n
}

// VLLMFamily reports whether the engine reads the projected file (vLLM and vLLM-Ascend).
func (e Engine) VLLMFamily() bool { return e.Vehicle == VehicleFile }

// KVRole is the vLLM family's kv_role for a Pod role: both directions for a plain server, a
// producer for a prefill half, a consumer for a decode half.
func (e Engine) KVRole(r Role) string {
	switch r {
	case RolePrefill:
		return "kv_producer"
	case RoleDecode:
		return "kv_consumer"
	default:
		return "kv_both"
	}
}

// OtherPrograms are the launch programs of engines other than e that cannot be mistaken for it
// (vLLM and vLLM-Ascend share the vllm executable).
func (e Engine) OtherPrograms() []Program {
	var out []Program
	for _, o := range All() {
		if o.Program.Executable == e.Program.Executable && o.Program.Module == e.Program.Module {
			continue
		}
		if !slices.Contains(out, o.Program) {
			out = append(out, o.Program)
		}
	}
	return out
}

// AcceptsTransport reports whether the client accepts a store-spelled protocol.
func (e Engine) AcceptsTransport(protocol string) bool {
	return e.Transports == nil || slices.Contains(e.Transports, protocol)
}

// Owned returns the flags injection owns given whether the dtype is owned.
func (e Engine) Owned(dtypeOwned bool) []string {
	if dtypeOwned {
		return e.OwnedFlags
	}
	return slices.DeleteFunc(slices.Clone(e.OwnedFlags), func(f string) bool { return f == DtypeFlag })
}

// FlagFinding is a flag a container names that injection refuses.
type FlagFinding struct {
	Flag  string // the canonical flag, e.g. --kv-transfer-config
	Token string // how the container spelled it (as the kubelet hands it to the process)
	Where string // "command" or "args"
	Index int    // the token's index in Where
	Class string // OwnedKey, ConfigSource, OffloadingConflict, ConfigFile
	// From is the argument as written when the kubelet's $(NAME) expansion made Token of it.
	From string
}

// Refusal classes for keys. They are stable: metrics count by them.
const (
	ClassOwnedKey           = "OwnedKey"
	ClassConfigSource       = "ConfigSource"
	ClassOffloadingConflict = "OffloadingConflict"
	// ClassConfigFile: a file of options (--config) admission cannot read.
	ClassConfigFile = "ConfigFile"
	// ClassUnseenValue: a value admission cannot read ($(NAME) from valueFrom or envFrom) where
	// it could be a flag.
	ClassUnseenValue = "UnseenValue"
)

// FindRefusedFlags scans command and args for every flag this engine refuses, in every
// spelling its parser reads, and for its configuration-file flag (ClassConfigFile), which a
// Pod may declare (the caller decides).
func (e Engine) FindRefusedFlags(command, args []string, dtypeOwned bool) []FlagFinding {
	var out []FlagFinding
	check := func(flags []string, class string) {
		for _, f := range flags {
			for _, part := range []struct {
				name string
				argv []string
			}{{"command", command}, {"args", args}} {
				for _, i := range e.Parser.Find(part.argv, f) {
					out = append(out, FlagFinding{Flag: f, Token: part.argv[i], Where: part.name, Index: i, Class: class})
				}
			}
		}
	}
	check(e.Owned(dtypeOwned), ClassOwnedKey)
	check(e.SourceFlags, ClassConfigSource)
	check(e.RefusedFlags, ClassOffloadingConflict)
	if e.ConfigFileFlag != "" {
		check([]string{e.ConfigFileFlag}, ClassConfigFile)
	}
	return out
}

// Names a container argument by the flag it was read as, for messages: "--kv_transfer_config"
// (read as --kv-transfer-config).
func (f FlagFinding) describe() string {
	where := f.Where
	if f.From != "" {
		where = fmt.Sprintf("%s[%d] (%q, which the kubelet expands to %q)", f.Where, f.Index, f.From, f.Token)
	}
	if f.Token == f.Flag || strings.HasPrefix(f.Token, f.Flag+"=") {
		return fmt.Sprintf("%s in %s", f.Flag, where)
	}
	return fmt.Sprintf("%q in %s (read by the engine as %s)", f.Token, where, f.Flag)
}

// Expanded records, on findings of FindRefusedFlags over expanded arguments, the argument as
// written where expansion changed it, so the message shows both.
func Expanded(fs []FlagFinding, command, args []string) []FlagFinding {
	for i := range fs {
		raw := args
		if fs[i].Where == "command" {
			raw = command
		}
		if fs[i].Index < len(raw) && raw[fs[i].Index] != fs[i].Token {
			fs[i].From = raw[fs[i].Index]
		}
	}
	return fs
}

// Message says why the finding is refused and how to fix it.
func (e Engine) Message(f FlagFinding) string {
	switch f.Class {
	case ClassConfigSource:
		return fmt.Sprintf("%s selects where %s reads its store configuration from, which would leave every injected value present and unread; remove it and let the Binding configure the store", f.describe(), e.Name)
	case ClassOffloadingConflict:
		return fmt.Sprintf("%s makes %s replace the injected connector with its OffloadingConnector, silently, so the container would use no shared cache; remove it (host-DRAM offloading and the shared pool are alternatives, choose one)", f.describe(), e.Name)
	case ClassConfigFile:
		return fmt.Sprintf("%s names a file of options %s reads into its arguments, where admission cannot see them: a key there for %s would set what injection owns or refuses, unseen; pass those options as arguments instead, where they are checked",
			f.describe(), e.Name, orList(slices.Concat(e.OwnedFlags, e.SourceFlags, e.RefusedFlags)))
	}
	if f.Flag == DtypeFlag {
		return fmt.Sprintf("%s is owned by injection: the Binding's domain fixes the KV cache dtype; remove it (or set the Setting model-deployment-kv-cache-dtype-owned to \"false\" to let containers choose)", f.describe())
	}
	return fmt.Sprintf("%s is owned by injection: the Binding writes it, and a second value would be an ambiguity nothing reports; remove it", f.describe())
}

// SGLang's prefill/decode flags.
const (
	retractionBackupFlag = "--disaggregation-decode-retraction-backup"
	// DisaggregationModeFlag selects SGLang's half of a prefill/decode split.
	DisaggregationModeFlag = "--disaggregation-mode"
)

// ManagedTail is what a container gets after its engine fragment, decided from its own
// arguments (argv, as the process receives them): on SGLang, --enable-hierarchical-cache (the
// store hangs off the host tier), except on a decode half (--disaggregation-mode decode), where
// SGLang forces the radix cache off and refuses the two together, so it gets
// --disaggregation-decode-retraction-backup cpu_tensor instead (unset, SGLang infers a host pool
// for retraction and meets the same check with no store at all). Arguments that name either
// flag, in any spelling SGLang reads (--enable-hicache included), get neither. Other engines get
// nothing. Pod injection and a ModelDeployment's roles both get it through Edits.
func (e Engine) ManagedTail(argv []string) []string {
	if e.HierarchicalCacheFlag == "" {
		return nil
	}
	for _, f := range []string{e.HierarchicalCacheFlag, retractionBackupFlag} {
		if len(e.Parser.Find(argv, f)) > 0 {
			return nil
		}
	}
	if mode, _ := e.DisaggregationMode(argv); mode == DisaggregationModeOf(RoleDecode) {
		return []string{retractionBackupFlag, "cpu_tensor"}
	}
	return []string{e.HierarchicalCacheFlag}
}

// DisaggregationModeOf is SGLang's --disaggregation-mode value for a role: prefill, decode, or
// "" for a plain server (SGLang's null).
func DisaggregationModeOf(role Role) string {
	switch role {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return ""
}

// DisaggregationMode is the --disaggregation-mode argv selects on an engine that has one
// (SGLang), the last one given, as argparse keeps it: its value as written ("null" reads as "",
// a plain server), and at, the index of the argument holding the value (-1 when none does).
func (e Engine) DisaggregationMode(argv []string) (mode string, at int) {
	if e.HierarchicalCacheFlag == "" {
		return "", -1
	}
	at = -1
	for _, i := range e.Parser.Find(argv, DisaggregationModeFlag) {
		if _, v, ok := strings.Cut(argv[i], "="); ok {
			mode, at = v, i
		} else if i+1 < len(argv) {
			mode, at = argv[i+1], i+1
		}
	}
	if mode == "null" {
		mode = ""
	}
	return mode, at
}

// DisaggregationArgs selects a prefill or decode half on engines that need a flag for it
// (SGLang); vLLM's halves differ by kv_role alone.
func (e Engine) DisaggregationArgs(role Role) []string {
	if e.HierarchicalCacheFlag == "" || role == RoleNone {
		return nil
	}
	return []string{DisaggregationModeFlag, DisaggregationModeOf(role)}
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// EnvFinding is something a launch line does to the environment that injection refuses.
type EnvFinding struct {
	Class   string
	Message string
}

// CheckLaunchEnv judges what env launchers in the launch line do to the environment. They act
// at process level, after the container's env is applied, so an assignment is judged like a
// declaration in env, and an injected variable assigned or unset there cannot be written in
// place: the value injection writes would never reach the engine.
func (e Engine) CheckLaunchEnv(l Launch) []EnvFinding {
	var out []EnvFinding
	if l.ClearsEnv != "" {
		out = append(out, EnvFinding{Class: ClassOwnedKey, Message: fmt.Sprintf(
			"the container's launch line runs \"env %s\", which starts %s with an empty environment and drops every variable injection writes (%s); remove %s",
			l.ClearsEnv, e.Name, strings.Join(e.InjectedEnv, ", "), l.ClearsEnv)})
	}
	for _, c := range l.Env {
		switch {
		case c.Unset && slices.Contains(e.InjectedEnv, c.Name):
			out = append(out, EnvFinding{Class: ClassOwnedKey, Message: fmt.Sprintf(
				"the container's launch line unsets %s (%q through env), so the value injection writes would never reach %s; remove it",
				c.Name, c.Token, e.Name)})
		case c.Unset:
		case slices.Contains(e.SourceEnv, c.Name):
			out = append(out, EnvFinding{Class: ClassConfigSource, Message: fmt.Sprintf(
				"the container's launch line assigns %s (%q through env), which selects where %s reads its store configuration from and would leave every injected value unread; remove it and let the Binding configure the store",
				c.Name, c.Token, e.Name)})
		case slices.Contains(e.OverrideEnv, c.Name):
			out = append(out, EnvFinding{Class: ClassOwnedKey, Message: fmt.Sprintf(
				"the container's launch line assigns %s (%q through env), which %s reads instead of the projected file's value, so the Binding's would be unread; remove it",
				c.Name, c.Token, e.Name)})
		case slices.Contains(e.InjectedEnv, c.Name):
			out = append(out, EnvFinding{Class: ClassOwnedKey, Message: fmt.Sprintf(
				"the container's launch line assigns %s (%q through env), which overrides the value injection writes at process level, where it cannot be written in place; remove the assignment and let the Binding set it",
				c.Name, c.Token)})
		}
	}
	return out
}

// OverrideEnvMessage is why a container's own declaration of an OverrideEnv variable is refused.
func (e Engine) OverrideEnvMessage(name string) string {
	return fmt.Sprintf("env %s is read by %s instead of the projected file's value, so the Binding's would be unread; remove it and let the Binding configure the store", name, e.Name)
}

// JudgedFlags are the flags injection writes, refuses or looks for on engine e, in the order
// the support table checks each release's parser for them.
func (e Engine) JudgedFlags() []string {
	out := slices.Concat(e.OwnedFlags, e.SourceFlags, e.RefusedFlags)
	if e.ConfigFileFlag != "" {
		out = append(out, e.ConfigFileFlag)
	}
	if e.HierarchicalCacheFlag != "" {
		out = append(out, e.HierarchicalCacheFlag, DisaggregationModeFlag, retractionBackupFlag)
	}
	return out
}
