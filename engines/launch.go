package engines

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Program is how an engine is launched: vLLM family by the executable's base name "vllm";
// SGLang by a Python interpreter with "-m sglang.launch_server".
type Program struct {
	Executable string // base name, e.g. "vllm"; "" when Module is set
	Module     string // python -m module, e.g. "sglang.launch_server"
	Engine     string // human name for messages: "vLLM", "SGLang", "vLLM-Ascend"
}

// Launch is what CheckLaunch found.
type Launch struct {
	Program   string // base name of the program after launchers are seen through: "vllm", "python3", "start.sh"; "" only for an admitted args-without-command launch
	Forwarded bool   // true only when the launch-args-forwarded declaration admitted a launch that would otherwise be refused
	// Env is what env launchers on the way do to the program's environment, in order: a
	// NAME=VALUE assignment or an -u NAME. They act at process level, after the container's env,
	// so the engine judges them like declarations (Engine.CheckLaunchEnv).
	Env []EnvChange
	// ClearsEnv is the env option that starts the program with an empty environment ("-i",
	// "--ignore-environment", "-"), "" when none does.
	ClearsEnv string
	// ArgsAt is the index in command+args of the first argument the program parses as its own
	// (after the program, or after python's -m module); what comes before it (launchers, their
	// options, the program) decides what runs. 0 for an admitted args-without-command launch.
	ArgsAt int
}

// EnvChange is one thing an env launcher does to the environment.
type EnvChange struct {
	Name  string
	Token string // as the container spells it: "A=1", or "-u A"
	Unset bool
}

// LaunchRefusal says why a launch is refused; Class is a stable identifier for metrics.
type LaunchRefusal struct {
	Class   string
	Message string
}

func (r *LaunchRefusal) Error() string { return r.Message }

// Launch refusal classes. They are stable: metrics count by them. The ones marked forwardable
// are admitted when the Pod declares kvcache.gpustack.ai/launch-args-forwarded: "true".
const (
	// LaunchMissing: neither command nor args. Never admitted.
	LaunchMissing = "LaunchMissing"
	// LaunchNoCommand: args without command; the image ENTRYPOINT is invisible. Forwardable.
	LaunchNoCommand = "LaunchNoCommand"
	// LaunchShell: a shell running a -c string. Never admitted: appended arguments become the
	// string's positional parameters, whatever the Pod declares.
	LaunchShell = "LaunchShell"
	// LaunchScript: a program whose base name ends in .sh. Forwardable.
	LaunchScript = "LaunchScript"
	// LaunchEnvSplit: env -S, whose command line admission cannot see. Forwardable.
	LaunchEnvSplit = "LaunchEnvSplit"
	// LaunchIncomplete: a launcher (or shell, or interpreter) with nothing after it to run.
	// Never admitted.
	LaunchIncomplete = "LaunchIncomplete"
	// LaunchOtherEngine: another engine's recognised program. Never admitted.
	LaunchOtherEngine = "LaunchOtherEngine"
	// LaunchUnrecognised: any other program, including a launcher given an option admission
	// does not know. Forwardable.
	LaunchUnrecognised = "LaunchUnrecognised"
	// LaunchPositional: a bare "--" after the program, behind which the appended flags would be
	// read as positional arguments. Never admitted.
	LaunchPositional = "LaunchPositional"
)

// launchForwardable lists the classes the launch-args-forwarded declaration admits.
var launchForwardable = []string{LaunchNoCommand, LaunchEnvSplit, LaunchScript, LaunchUnrecognised}

// launchDeclaration is the annotation, as a Pod spells it, that admits a forwardable launch.
const launchDeclaration = `kvcache.gpustack.ai/launch-args-forwarded: "true"`

// launchModuleFamilies: an executable whose console script is a thin wrapper over Python
// modules of the same parser. `python3 -m vllm.entrypoints.openai.api_server` and
// `python3 -m vllm.entrypoints.cli.main serve` read the same engine arguments as `vllm serve`,
// so they are the vLLM family's program too (Launch.Program is then the interpreter's name).
var launchModuleFamilies = map[string]string{"vllm": "vllm.entrypoints."}

// runsModule reports whether `python -m module` is this program.
func (p Program) runsModule(module string) bool {
	if p.Module != "" {
		return module == p.Module
	}
	prefix, ok := launchModuleFamilies[p.Executable]
	return ok && strings.HasPrefix(module, prefix)
}

// engineName is the program's engine for messages.
func (p Program) engineName() string {
	if p.Engine == "" {
		return "the engine"
	}
	return p.Engine
}

// argv is how the program is launched directly, for messages.
func (p Program) argv() []string {
	if p.Module != "" {
		return []string{"python3", "-m", p.Module}
	}
	return []string{p.Executable}
}

// CheckLaunch decides whether command+args launch `want` so that appended args reach it.
// others are the other engines' programs (a recognised program of another engine is refused
// as such). forwarded is the Pod's kvcache.gpustack.ai/launch-args-forwarded: "true" declaration.
//
// argv = command + args is read the way the container runtime and each launcher read it:
// env, tini, dumb-init, timeout and busybox/toybox (nested in any order) are seen through to
// the program they start. On refusal, Launch.Program still carries the program found, if any,
// and Forwarded is false.
func CheckLaunch(command, args []string, want Program, others []Program, forwarded bool) (Launch, *LaunchRefusal) {
	if len(command) == 0 && len(args) == 0 {
		return Launch{}, &LaunchRefusal{Class: LaunchMissing, Message: fmt.Sprintf(
			"the container sets neither command nor args, so it runs the image's ENTRYPOINT and CMD, which admission cannot see, and appended arguments would replace that CMD; set command to the engine itself, e.g. command: %s, with the engine's arguments in args. %s",
			launchJSON(want.argv()), launchEntrypointWarning)}
	}
	if len(command) == 0 {
		if forwarded {
			return Launch{Forwarded: true}, nil
		}
		return Launch{}, &LaunchRefusal{Class: LaunchNoCommand, Message: fmt.Sprintf(
			"the container sets args but no command, so its args go to the image's ENTRYPOINT, which admission cannot see, and nothing shows that appended arguments reach %s; set command to the engine itself, e.g. command: %s. %s",
			want.engineName(), launchJSON(want.argv()), launchEntrypointWarning)}
	}
	w := launchWalk{argv: append(slices.Clone(command), args...), commandLen: len(command), want: want, others: others, progAt: -1}
	f := w.run()
	if f.class == "" || slices.Contains(launchForwardable, f.class) {
		// Whatever runs first, a shell's -c string or a bare "--" later in the line keeps the
		// appended arguments from the engine's parser; no declaration admits either.
		if g := w.defeated(f); g != nil {
			f = *g
		}
	}
	l := Launch{Program: f.program, Env: w.envChanges, ClearsEnv: w.clears, ArgsAt: w.progAt + 1}
	if f.class == "" {
		return l, nil
	}
	if forwarded && slices.Contains(launchForwardable, f.class) {
		l.Forwarded = true
		return l, nil
	}
	return Launch{Program: f.program}, &LaunchRefusal{Class: f.class, Message: f.message}
}

// launchEntrypointWarning closes the refusals for a launch without command.
const launchEntrypointWarning = "Setting command also replaces the image ENTRYPOINT, which on accelerator images initialises the vendor runtime: keep that initialisation, e.g. through a wrapper that forwards its arguments, declared with " + launchDeclaration

// launchFinding is what the walk concluded: class "" is the wanted engine.
type launchFinding struct {
	class   string
	program string // base name for Launch.Program
	message string
}

// launchWalk reads argv from the program position onwards.
type launchWalk struct {
	argv       []string
	commandLen int // argv[:commandLen] is the container's command, the rest its args
	want       Program
	others     []Program
	through    []string // launchers seen through, base names, for messages
	envChanges []EnvChange
	clears     string
	// progAt is the index in argv of the program's token (the module's for python -m), -1 until
	// the walk reaches a program it can see.
	progAt int
}

// where names the part of the container argv[k] belongs to, and its index there.
func (w *launchWalk) where(k int) string {
	if k < w.commandLen {
		return fmt.Sprintf("command[%d]", k)
	}
	return fmt.Sprintf("args[%d]", k-w.commandLen)
}

// defeated looks past an admitted (or forwardable) finding for what would still keep the
// appended arguments from the engine: a shell running a -c string anywhere in the line, or a
// bare "--" after the program.
func (w *launchWalk) defeated(f launchFinding) *launchFinding {
	for k, t := range w.argv {
		if !slices.Contains(launchShells, path.Base(t)) {
			continue
		}
		if dashC, end, _ := shellOptions(w.argv, k); dashC {
			shown := strings.Join(append([]string{path.Base(t)}, w.argv[k+1:min(end, len(w.argv))]...), " ")
			return &launchFinding{class: LaunchShell, program: f.program, message: fmt.Sprintf(
				`the container's launch line runs %q at %s: the -c string is a single argument, so appended arguments become its $0, $1, ... instead of arguments to %s, and kvcache.gpustack.ai/launch-args-forwarded does not admit this; run the engine directly, e.g. command: %s, or through a wrapper script that ends in exec "$@", declared with %s`,
				shown, w.where(k), w.want.engineName(), launchJSON(w.want.argv()), launchDeclaration)}
		}
	}
	if w.progAt < 0 {
		return nil
	}
	for k := w.progAt + 1; k < len(w.argv); k++ {
		if w.argv[k] == "--" {
			return &launchFinding{class: LaunchPositional, program: f.program, message: fmt.Sprintf(
				`the container's %s is a bare "--": %s reads every argument after it as a positional argument, so the flags injection appends would not be read as flags; remove it`,
				w.where(k), w.want.engineName())}
		}
	}
	return nil
}

// Shells: with -c they run a string, and appended arguments become its positional parameters.
var launchShells = []string{"sh", "bash", "dash", "zsh", "ash", "ksh", "mksh"}

// launchPython matches a Python interpreter's base name: python, python3, python3.12.
var launchPython = regexp.MustCompile(`^python(3(\.[0-9]+)?)?$`)

// run examines the program at argv[0], seeing through launchers.
func (w *launchWalk) run() launchFinding {
	i := 0
	for {
		if w.argv[i] == "" {
			return launchFinding{class: LaunchIncomplete, message: fmt.Sprintf(
				"the container's program name is empty, so nothing would run; set command to the engine itself, e.g. command: %s",
				launchJSON(w.want.argv()))}
		}
		base := path.Base(w.argv[i])
		var next int
		var f *launchFinding
		switch {
		case base == "env":
			next, f = w.env(i)
		case base == "tini":
			next, f = w.options(i, launchTini)
		case base == "dumb-init":
			next, f = w.options(i, launchDumbInit)
		case base == "timeout":
			next, f = w.timeout(i)
		case base == "busybox" || base == "toybox":
			next, f = w.multicall(i)
		case slices.Contains(launchShells, base):
			return w.shell(i)
		case launchPython.MatchString(base):
			return w.python(i)
		default:
			return w.executable(i)
		}
		if f != nil {
			return *f
		}
		if next >= len(w.argv) {
			prefix := launchBases(w.argv[:min(next, len(w.argv))])
			return w.incomplete(prefix, base, append(slices.Clone(prefix), w.want.argv()...))
		}
		w.through = append(w.through, base)
		i = next
	}
}

// launchOptions describes a launcher's command line, as getopt_long with a leading '+' reads it
// (options end at the first operand or at "--"; long options may be abbreviated).
type launchOptions struct {
	short    string   // short options without an argument
	shortArg string   // short options with an argument (-s SIG, -sSIG)
	long     []string // long options without an argument
	longArg  []string // long options with an argument (--signal=SIG, --signal SIG)
	longOpt  []string // long options with an optional argument (--block-signal[=SIG])
	exits    []string // options after which the launcher prints and exits, running nothing
	dashIsI  bool     // env: a lone "-" is -i
	// stops are options after which what follows is no longer this launcher's to parse (env -S
	// hands the rest to its split command line).
	stops []string
}

var (
	launchEnv = launchOptions{
		short: "i0v", shortArg: "uCS",
		long:    []string{"--ignore-environment", "--null", "--debug", "--list-signal-handling"},
		longArg: []string{"--unset", "--chdir", "--split-string"},
		longOpt: []string{"--block-signal", "--default-signal", "--ignore-signal"},
		exits:   []string{"--help", "--version"},
		dashIsI: true,
		stops:   []string{"-S", "--split-string"},
	}
	launchTini = launchOptions{
		short: "svwgl", shortArg: "pe",
		exits: []string{"-h", "-l", "--version"},
	}
	launchDumbInit = launchOptions{
		short: "cv", shortArg: "r",
		long:    []string{"--single-child", "--verbose"},
		longArg: []string{"--rewrite"},
		exits:   []string{"-h", "-V", "--help", "--version"},
	}
	// timeout: GNU coreutils, plus busybox's older -t SECS.
	launchTimeout = launchOptions{
		short: "vfp", shortArg: "skt",
		long:    []string{"--preserve-status", "--foreground", "--verbose"},
		longArg: []string{"--signal", "--kill-after"},
		exits:   []string{"--help", "--version"},
	}
)

// parsed is what launchOptions.parse read.
type parsed struct {
	next    int      // index of the first operand
	seen    []string // options in canonical form ("-S", "--split-string")
	unknown string   // an option the launcher does not have
	exits   string   // an option that makes it exit
	missing string   // an option whose argument is missing (argv ends)
	values  []optionValue
}

// optionValue is an option given with its argument.
type optionValue struct {
	name  string // canonical: "-u", "--unset"
	value string
	token string // as spelled, the argument included: "-u HOME", "--unset=HOME"
}

// parse reads the options of the launcher at argv[i].
func (o launchOptions) parse(argv []string, i int) parsed {
	j := i + 1
	var p parsed
	for j < len(argv) {
		t := argv[j]
		switch {
		case t == "--":
			p.next = j + 1
			return p
		case t == "-" && o.dashIsI:
			p.seen = append(p.seen, "-")
			j++
		case strings.HasPrefix(t, "--"):
			n, _, hasValue := strings.Cut(t, "=")
			if slices.Contains(o.exits, n) {
				p.exits = t
				return p
			}
			all := slices.Concat(o.long, o.longArg, o.longOpt)
			name := launchResolveLong(all, n)
			if name == "" {
				p.unknown = t
				return p
			}
			p.seen = append(p.seen, name)
			j++
			if slices.Contains(o.stops, name) {
				p.next = j
				return p
			}
			if slices.Contains(o.longArg, name) {
				if !hasValue {
					if j >= len(argv) {
						p.missing = t
						return p
					}
					p.values = append(p.values, optionValue{name: name, value: argv[j], token: t + " " + argv[j]})
					j++ // --signal KILL
				} else {
					_, v, _ := strings.Cut(t, "=")
					p.values = append(p.values, optionValue{name: name, value: v, token: t})
				}
			}
		case strings.HasPrefix(t, "-") && len(t) > 1:
			j++
			for k := 1; k < len(t); k++ {
				c := t[k : k+1]
				switch {
				case slices.Contains(o.exits, "-"+c):
					p.exits = t
					return p
				case strings.Contains(o.short, c):
					p.seen = append(p.seen, "-"+c)
				case strings.Contains(o.shortArg, c):
					p.seen = append(p.seen, "-"+c)
					if slices.Contains(o.stops, "-"+c) {
						p.next = j
						return p
					}
					if k == len(t)-1 {
						if j >= len(argv) {
							p.missing = "-" + c
							return p
						}
						p.values = append(p.values, optionValue{name: "-" + c, value: argv[j], token: t + " " + argv[j]})
						j++ // -s KILL; otherwise the rest of the bundle is the argument
					} else {
						p.values = append(p.values, optionValue{name: "-" + c, value: t[k+1:], token: t})
					}
					k = len(t)
				default:
					p.unknown = t
					return p
				}
			}
		default:
			p.next = j
			return p
		}
	}
	p.next = j
	return p
}

// launchResolveLong resolves a long option, exact or a unique abbreviation, as getopt_long does.
func launchResolveLong(all []string, n string) string {
	if slices.Contains(all, n) {
		return n
	}
	match := ""
	for _, o := range all {
		if len(n) > len("--") && strings.HasPrefix(o, n) {
			if match != "" {
				return ""
			}
			match = o
		}
	}
	return match
}

// options sees through a launcher whose program follows its options (tini, dumb-init).
func (w *launchWalk) options(i int, o launchOptions) (int, *launchFinding) {
	p := o.parse(w.argv, i)
	if f := w.badOption(i, p); f != nil {
		return 0, f
	}
	return p.next, nil
}

// badOption turns an unknown or exiting option into a finding.
func (w *launchWalk) badOption(i int, p parsed) *launchFinding {
	base := path.Base(w.argv[i])
	switch {
	case p.missing != "":
		return &launchFinding{class: LaunchIncomplete, program: base, message: fmt.Sprintf(
			"the container runs %s, whose option %s lacks its argument, so %s starts nothing; give the option its argument and name %s after it",
			w.shown(strings.Join(launchBases(w.argv[i:]), " ")), p.missing, base, w.want.engineName())}
	case p.exits != "":
		return &launchFinding{class: LaunchIncomplete, program: base, message: fmt.Sprintf(
			"the container runs %s, which prints and exits without starting a program; remove %s",
			w.shown(base+" "+p.exits), p.exits)}
	case p.unknown != "":
		return &launchFinding{class: LaunchUnrecognised, program: base, message: fmt.Sprintf(
			"the container runs %s with option %s, which admission does not know, so it cannot tell which program %s starts; remove the option, or declare %s if the launch passes its arguments on to %s",
			w.shown(base), p.unknown, base, launchDeclaration, w.want.engineName())}
	}
	return nil
}

// env sees through env: options, then NAME=VALUE assignments, then the program. -S hides the
// command line.
func (w *launchWalk) env(i int) (int, *launchFinding) {
	p := launchEnv.parse(w.argv, i)
	if f := w.badOption(i, p); f != nil {
		return 0, f
	}
	for _, s := range p.seen {
		if s == "-S" || s == "--split-string" {
			// The split string is env's to read: the program's own arguments follow it.
			w.progAt = p.next - 1
			if tok := w.argv[p.next-1]; !strings.Contains(tok, "=") && (strings.HasPrefix(tok, "--") || strings.HasSuffix(tok, "S")) && p.next < len(w.argv) {
				w.progAt = p.next
			}
			return 0, &launchFinding{class: LaunchEnvSplit, program: "env", message: fmt.Sprintf(
				"the container runs %s, which splits a string into a command line admission cannot see, so nothing shows that appended arguments reach %s; run the engine without env %s, e.g. command: %s, or declare %s if the split command line passes its arguments on",
				w.shown("env "+s), w.want.engineName(), s, launchJSON(w.want.argv()), launchDeclaration)}
		}
	}
	for _, s := range p.seen {
		if s == "-i" || s == "--ignore-environment" || s == "-" {
			w.clears = s
		}
	}
	for _, o := range p.values {
		if o.name == "-u" || o.name == "--unset" {
			w.envChanges = append(w.envChanges, EnvChange{Name: o.value, Token: o.token, Unset: true})
		}
	}
	j := p.next
	for j < len(w.argv) && strings.Contains(w.argv[j], "=") {
		name, _, _ := strings.Cut(w.argv[j], "=")
		w.envChanges = append(w.envChanges, EnvChange{Name: name, Token: w.argv[j]})
		j++
	}
	return j, nil
}

// launchDuration is a timeout DURATION: a number with an optional s, m, h or d suffix.
var launchDuration = regexp.MustCompile(`(?i)^(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[-+]?[0-9]+)?|inf(?:inity)?)[smhd]?$`)

// timeout sees through timeout: options, a DURATION (unless busybox's -t gave it), the program.
func (w *launchWalk) timeout(i int) (int, *launchFinding) {
	p := launchTimeout.parse(w.argv, i)
	if f := w.badOption(i, p); f != nil {
		return 0, f
	}
	if slices.Contains(p.seen, "-t") {
		return p.next, nil
	}
	if p.next >= len(w.argv) {
		prefix := launchBases(w.argv[:min(p.next, len(w.argv))])
		f := w.incomplete(prefix, "timeout", slices.Concat(prefix, []string{"30"}, w.want.argv()))
		return 0, &f
	}
	if d := w.argv[p.next]; !launchDuration.MatchString(d) {
		example := append(slices.Clone(w.argv[i:p.next]), "30")
		return 0, &launchFinding{class: LaunchIncomplete, program: "timeout", message: fmt.Sprintf(
			"the container runs %s, but timeout takes a DURATION before the program and %q is not one, so it would start nothing; put the duration first, e.g. command: %s",
			w.shown(strings.Join(launchBases(w.argv[i:p.next+1]), " ")), d, launchJSON(append(example, w.want.argv()...)))}
	}
	return p.next + 1, nil
}

// multicall sees through busybox and toybox: the next token is the applet, examined in turn.
func (w *launchWalk) multicall(i int) (int, *launchFinding) {
	base := path.Base(w.argv[i])
	if i+1 >= len(w.argv) {
		f := w.incomplete(launchBases(w.argv[:i+1]), base, w.want.argv())
		return 0, &f
	}
	if strings.HasPrefix(w.argv[i+1], "-") {
		return 0, &launchFinding{class: LaunchIncomplete, program: base, message: fmt.Sprintf(
			"the container runs %s, which names no applet and starts no program; run the engine directly, e.g. command: %s",
			w.shown(base+" "+w.argv[i+1]), launchJSON(w.want.argv()))}
	}
	return i + 1, nil
}

// incomplete is a launcher with nothing after it: prefix is all of argv, example a fix.
func (w *launchWalk) incomplete(prefix []string, base string, example []string) launchFinding {
	return launchFinding{class: LaunchIncomplete, program: base, message: fmt.Sprintf(
		"the container runs %q with no program after it, so nothing would receive the appended arguments; name %s after it, e.g. command: %s",
		strings.Join(prefix, " "), w.want.engineName(), launchJSON(example))}
}

// shell reads a shell's options: any bundle with c (-c, -lc, -euc, +c) runs a string; -o and
// -O take an argument, as do --rcfile, --init-file and zsh's --emulate. Without -c the first
// operand is a script file, judged as that script; without one the shell reads standard input.
func (w *launchWalk) shell(i int) launchFinding {
	sh := path.Base(w.argv[i])
	dashC, j, stdin := shellOptions(w.argv, i)
	if dashC {
		shown := strings.Join(append([]string{sh}, w.argv[i+1:min(j, len(w.argv))]...), " ")
		return launchFinding{class: LaunchShell, program: sh, message: fmt.Sprintf(
			`the container runs %s: the -c string is a single argument, so appended arguments become its $0, $1, ... instead of arguments to %s, and kvcache.gpustack.ai/launch-args-forwarded does not admit this; run the engine directly, e.g. command: %s, or through a wrapper script that ends in exec "$@", declared with %s`,
			w.shown(shown), w.want.engineName(), launchJSON(w.want.argv()), launchDeclaration)}
	}
	if stdin || j >= len(w.argv) {
		return launchFinding{class: LaunchIncomplete, program: sh, message: fmt.Sprintf(
			"the container runs %s with no script or -c string, so it would read commands from standard input and nothing would receive the appended arguments; run the engine directly, e.g. command: %s",
			w.shown(sh), launchJSON(w.want.argv()))}
	}
	w.through = append(w.through, sh)
	return w.script(j)
}

// shellOptions reads the options of the shell at argv[i]: whether a bundle holds c (it runs a
// string), the index after the options, and whether -s reads standard input.
func shellOptions(argv []string, i int) (dashC bool, next int, stdin bool) {
	j := i + 1
	for j < len(argv) {
		t := argv[j]
		if t == "--" || t == "-" {
			j++
			break
		}
		if strings.HasPrefix(t, "--") {
			n, _, hasValue := strings.Cut(t, "=")
			j++
			if !hasValue && (n == "--rcfile" || n == "--init-file" || n == "--emulate") {
				j++
			}
			continue
		}
		if len(t) > 1 && (t[0] == '-' || t[0] == '+') {
			j++
			for _, c := range t[1:] {
				switch c {
				case 'c':
					dashC = true
				case 's':
					stdin = true
				case 'o', 'O':
					j++ // -o pipefail
				}
			}
			if dashC {
				break
			}
			continue
		}
		break
	}
	return dashC, j, stdin
}

// script judges a file a shell runs: by its .sh suffix, otherwise as an unrecognised program.
// It is never the engine itself.
func (w *launchWalk) script(j int) launchFinding {
	w.progAt = j
	base := path.Base(w.argv[j])
	if strings.HasSuffix(base, ".sh") {
		return w.shScript(j)
	}
	return w.unrecognised(base, w.argv[j], base)
}

// python reads a Python interpreter's options up to -m MODULE (also -mMODULE), -c, or a script.
func (w *launchWalk) python(i int) launchFinding {
	py := path.Base(w.argv[i])
	j := i + 1
	for j < len(w.argv) {
		t := w.argv[j]
		switch {
		case t == "-":
			return w.pythonNothing(py)
		case t == "--":
			j++
		case t == "--check-hash-based-pycs":
			j += 2
			continue
		case strings.HasPrefix(t, "--"):
			if slices.Contains([]string{"--help", "--version", "--help-env", "--help-xoptions", "--help-all"}, t) {
				return *w.badOption(i, parsed{exits: t})
			}
			return *w.badOption(i, parsed{unknown: t})
		case strings.HasPrefix(t, "-") && len(t) > 1:
			j++
			for k := 1; k < len(t); k++ {
				c := t[k]
				rest := t[k+1:]
				switch {
				case strings.IndexByte("bBdEiIOPqRsSuvx", c) >= 0:
					continue
				case c == 'h' || c == 'V' || c == '?':
					return *w.badOption(i, parsed{exits: t})
				case c == 'W' || c == 'X':
					if rest == "" {
						j++ // -X dev
					}
				case c == 'c':
					return w.unrecognised(py, py+" -c", "the -c code")
				case c == 'm':
					module, at := rest, j-1
					if module == "" {
						if j >= len(w.argv) {
							return w.pythonNothing(py)
						}
						module, at = w.argv[j], j
					}
					w.progAt = at
					return w.pythonModule(py, module)
				default:
					return *w.badOption(i, parsed{unknown: t})
				}
				break
			}
			continue
		}
		break
	}
	if j >= len(w.argv) {
		return w.pythonNothing(py)
	}
	w.progAt = j
	return w.unrecognised(py, py+" "+w.argv[j], path.Base(w.argv[j]))
}

func (w *launchWalk) pythonNothing(py string) launchFinding {
	return launchFinding{class: LaunchIncomplete, program: py, message: fmt.Sprintf(
		"the container runs %s with no module or script, so nothing would receive the appended arguments; run the engine, e.g. command: %s",
		w.shown(py), launchJSON(w.want.argv()))}
}

// pythonModule judges `python -m module`.
func (w *launchWalk) pythonModule(py, module string) launchFinding {
	if w.want.runsModule(module) {
		return launchFinding{program: py}
	}
	shown := py + " -m " + module
	if f := w.otherEngine(shown, py, func(o Program) bool { return o.runsModule(module) }); f != nil {
		return *f
	}
	return w.unrecognised(py, shown, module)
}

// executable judges a program by its base name.
func (w *launchWalk) executable(i int) launchFinding {
	w.progAt = i
	base := path.Base(w.argv[i])
	if w.want.Executable != "" && base == w.want.Executable {
		return launchFinding{program: base}
	}
	if f := w.otherEngine(w.argv[i], base, func(o Program) bool { return o.Executable != "" && o.Executable == base }); f != nil {
		return *f
	}
	if strings.HasSuffix(base, ".sh") {
		return w.shScript(i)
	}
	return w.unrecognised(base, w.argv[i], base)
}

// otherEngine refuses a program another engine is launched by.
func (w *launchWalk) otherEngine(shown, program string, runs func(Program) bool) *launchFinding {
	var names []string
	for _, o := range w.others {
		if runs(o) && !slices.Contains(names, o.engineName()) {
			names = append(names, o.engineName())
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &launchFinding{class: LaunchOtherEngine, program: program, message: fmt.Sprintf(
		"the container runs %s, the program of %s, but the Pod declares kvcache.gpustack.ai/engine: %s; fix the annotation or the command so that both name the same engine",
		w.shown(shown), strings.Join(names, " or "), w.want.engineName())}
}

// shScript refuses a .sh script unless declared to forward.
func (w *launchWalk) shScript(i int) launchFinding {
	base := path.Base(w.argv[i])
	return launchFinding{class: LaunchScript, program: base, message: fmt.Sprintf(
		`the container runs the script %s, and admission cannot see whether it passes appended arguments on to %s; run the engine directly, e.g. command: %s, or, if the script forwards its arguments (ends in exec "$@"), declare %s`,
		w.shown(w.argv[i]), w.want.engineName(), launchJSON(w.want.argv()), launchDeclaration)}
}

// unrecognised refuses any other program unless declared to forward: program is its base name,
// shown what the container runs, who what would have to pass the arguments on.
func (w *launchWalk) unrecognised(program, shown, who string) launchFinding {
	return launchFinding{class: LaunchUnrecognised, program: program, message: fmt.Sprintf(
		"the container runs %s, which admission does not recognise as %s and cannot see into, so nothing shows that appended arguments reach the engine; set command to the engine itself, e.g. command: %s, or declare %s if %s passes its arguments on",
		w.shown(shown), w.want.engineName(), launchJSON(w.want.argv()), launchDeclaration, who)}
}

// shown quotes what the container runs, naming the launchers it was seen through.
func (w *launchWalk) shown(s string) string {
	if len(w.through) == 0 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q (through %s)", s, strings.Join(w.through, ", "))
}

// launchBases returns argv with its first element reduced to its base name, for examples.
func launchBases(argv []string) []string {
	out := slices.Clone(argv)
	if len(out) > 0 {
		out[0] = path.Base(out[0])
	}
	return out
}

// launchJSON writes argv as a YAML flow sequence: ["python3", "-m", "sglang.launch_server"].
func launchJSON(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
