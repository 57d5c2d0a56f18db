package engines

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The launch programs as the engine definitions declare them, kept here so these tests do not
// depend on engines.go.
var (
	launchTestVLLM   = Program{Executable: "vllm", Engine: "vLLM"}
	launchTestAscend = Program{Executable: "vllm", Engine: "vLLM-Ascend"}
	launchTestSGLang = Program{Module: "sglang.launch_server", Engine: "SGLang"}
)

// launchTestOthers is what Engine.OtherPrograms returns for each.
func launchTestOthers(p Program) []Program {
	if p.Module != "" {
		return []Program{launchTestVLLM, launchTestAscend}
	}
	return []Program{launchTestSGLang}
}

type launchCase struct {
	name    string
	want    Program
	command []string
	args    []string
	program string // Launch.Program, admitted or refused
	class   string // "" admitted without any declaration
}

// a splits a command line on spaces (no token in these tables contains one).
func a(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, " ")
}

func launchCases() []launchCase {
	v, s, asc := launchTestVLLM, launchTestSGLang, launchTestAscend
	return []launchCase{
		// Recognised programs.
		{"vllm", v, a("vllm"), a("serve Qwen/Qwen3-8B"), "vllm", ""},
		{"vllm by path", v, a("/usr/local/bin/vllm serve"), a("m"), "vllm", ""},
		{"vllm without args", v, a("vllm serve m"), nil, "vllm", ""},
		{"vllm on vLLM-Ascend", asc, a("vllm"), a("serve m"), "vllm", ""},
		{"python3 -m sglang.launch_server", s, a("python3 -m sglang.launch_server"), a("--model-path m"), "python3", ""},
		{"python3 -u -m", s, a("python3 -u -m sglang.launch_server"), nil, "python3", ""},
		{"python -mMODULE", s, a("python -msglang.launch_server"), nil, "python", ""},
		{"python3.12 by path with -X -W -O", s, a("/usr/bin/python3.12 -X dev -W ignore -O -m sglang.launch_server"), nil, "python3.12", ""},
		{"python3 bundles and attached -W -X", s, a("python3 -uB -Wignore -Xfaulthandler -OO -m sglang.launch_server"), nil, "python3", ""},
		{"python3 --check-hash-based-pycs and --", s, a("python3 --check-hash-based-pycs never -I -m sglang.launch_server"), nil, "python3", ""},
		{"module in args", s, a("python3"), a("-m sglang.launch_server --model-path m"), "python3", ""},
		{"vLLM through python3 -m vllm.entrypoints.openai.api_server", v, a("python3 -m vllm.entrypoints.openai.api_server"), a("--model m"), "python3", ""},
		{"vLLM through python3 -m vllm.entrypoints.cli.main serve", v, a("python3 -m vllm.entrypoints.cli.main serve m"), nil, "python3", ""},

		// Launchers seen through, each option form.
		{"tini --", v, a("tini -- vllm serve"), nil, "vllm", ""},
		{"tini by path, every option", v, a("/usr/bin/tini -s -g -vvv -w -p SIGTERM -e 143 -e 0 -- vllm"), a("serve"), "vllm", ""},
		{"tini attached arguments, no --", v, a("tini -pSIGKILL -e143 vllm serve"), nil, "vllm", ""},
		{"tini bundle", v, a("tini -sgw vllm"), nil, "vllm", ""},
		{"launcher in command, program in args", v, a("tini --"), a("vllm serve m"), "vllm", ""},
		{"dumb-init --", s, a("dumb-init -- python3 -m sglang.launch_server"), nil, "python3", ""},
		{"dumb-init every option", v, a("dumb-init -c --single-child -v --verbose -r 15:2 -r15:3 --rewrite 2:15 --rewrite=1:2 vllm serve"), nil, "vllm", ""},
		{"timeout DURATION", v, a("timeout 30 vllm serve"), nil, "vllm", ""},
		{"timeout -s KILL 30s", v, a("timeout -s KILL 30s vllm"), a("serve"), "vllm", ""},
		{"timeout long options with =", v, a("timeout --signal=TERM --kill-after=5s --preserve-status --foreground -v 1.5m vllm"), nil, "vllm", ""},
		{"timeout long options with a separate value", v, a("timeout --signal TERM --kill-after 10 --verbose 2h vllm"), nil, "vllm", ""},
		{"timeout attached short arguments", v, a("timeout -sKILL -k5 1d vllm"), nil, "vllm", ""},
		{"timeout abbreviated long options", v, a("timeout --kill=5 --pres --fore 30 vllm"), nil, "vllm", ""},
		{"timeout -- and a fractional duration", v, a("timeout -- .5h vllm"), nil, "vllm", ""},
		{"timeout inf", v, a("timeout inf vllm"), nil, "vllm", ""},
		{"busybox timeout -t SECS", v, a("busybox timeout -t 30 vllm"), nil, "vllm", ""},
		{"env", v, a("env vllm serve"), nil, "vllm", ""},
		{"env assignments", v, a("env A=1 B=x=y vllm serve"), nil, "vllm", ""},
		{"env every option", v, a("/usr/bin/env -i -0 -v -u HOME -uPATH --unset=X --unset Y -C /work -C/tmp --chdir=/ --chdir /w --ignore-environment --null --debug -- A=1 vllm"), nil, "vllm", ""},
		{"env signal options with optional arguments", v, a("env --block-signal --default-signal=INT --ignore-signal --list-signal-handling vllm"), nil, "vllm", ""},
		{"env - and a bundle", v, a("env - -iu HOME A=1 vllm"), nil, "vllm", ""},
		{"env abbreviated long option", v, a("env --u HOME --ignore-e vllm"), nil, "vllm", ""},
		{"busybox env", v, a("busybox env X=1 vllm serve"), nil, "vllm", ""},
		{"toybox env", v, a("toybox env vllm"), nil, "vllm", ""},
		{"nested launchers", v, a("tini -- env A=1 timeout 30 vllm serve"), nil, "vllm", ""},
		{"deeply nested launchers", s, a("dumb-init tini -- busybox env timeout -k 5 5m python3 -m sglang.launch_server"), nil, "python3", ""},

		// A shell's -c string or a bare "--" later in the line defeats the appended arguments
		// whatever runs first: never admitted, declaration or not.
		{"a wrapper followed by sh -c in args", v, a("/entrypoint"), a("sh -c vllm"), "entrypoint", LaunchShell},
		{"bash -lc after the engine's own arguments", v, a("vllm serve m"), a("bash -lc x"), "vllm", LaunchShell},
		{"sh -c behind a script", s, a("start.sh"), a("sh -euc python3"), "start.sh", LaunchShell},
		{"a bare -- after vllm", v, a("vllm"), a("serve m --"), "vllm", LaunchPositional},
		{"a bare -- after python3 -m sglang.launch_server", s, a("python3 -m sglang.launch_server"), a("--model-path m -- x"), "python3", LaunchPositional},
		{"a bare -- after a wrapper", v, a("/entrypoint --"), a("vllm serve"), "entrypoint", LaunchPositional},
		{"a -- that ends tini's options is tini's own", v, a("tini -- vllm serve m"), nil, "vllm", ""},

		// Shells with -c in any bundle: never admitted.
		{"bash -c", v, a("bash -c vllm"), nil, "bash", LaunchShell},
		{"sh -c in command, string in args", v, a("sh -c"), a(`exec vllm serve "$@"`), "sh", LaunchShell},
		{"bash -lc by path", v, a("/bin/bash -lc vllm"), nil, "bash", LaunchShell},
		{"sh -euc", v, a("sh -euc vllm"), nil, "sh", LaunchShell},
		{"bash -o pipefail -c", v, a("bash -o pipefail -c vllm"), nil, "bash", LaunchShell},
		{"bash -O extglob -c", v, a("bash -O extglob -c vllm"), nil, "bash", LaunchShell},
		{"bash --rcfile X -c", v, a("bash --rcfile /etc/profile -c vllm"), nil, "bash", LaunchShell},
		{"bash --init-file X -c", v, a("bash --init-file /etc/profile -c vllm"), nil, "bash", LaunchShell},
		{"bash --login -c", v, a("bash --login -c vllm"), nil, "bash", LaunchShell},
		{"bash +e -c", v, a("bash +e -c vllm"), nil, "bash", LaunchShell},
		{"bash +c (bash reads c in a + bundle as -c)", v, a("bash +c vllm"), nil, "bash", LaunchShell},
		{"bash -c with no string", v, a("bash -c"), nil, "bash", LaunchShell},
		{"dash -c", v, a("dash -c vllm"), nil, "dash", LaunchShell},
		{"zsh -c", v, a("zsh -c vllm"), nil, "zsh", LaunchShell},
		{"ash -c", v, a("ash -c vllm"), nil, "ash", LaunchShell},
		{"ksh -c", v, a("ksh -c vllm"), nil, "ksh", LaunchShell},
		{"mksh -c", v, a("mksh -c vllm"), nil, "mksh", LaunchShell},
		{"busybox sh -c", s, a("busybox sh -c python3"), nil, "sh", LaunchShell},
		{"tini -- bash -c", v, a("tini -- bash -c vllm"), nil, "bash", LaunchShell},

		// A shell running a script file is that script.
		{"bash start.sh", v, a("bash start.sh"), a("serve"), "start.sh", LaunchScript},
		{"sh /opt/run", v, a("sh /opt/run"), nil, "run", LaunchUnrecognised},
		{"bash -e -x script.sh", v, a("bash -e -x /opt/start.sh serve"), nil, "start.sh", LaunchScript},
		{"bash -- script.sh", v, a("bash -- start.sh"), nil, "start.sh", LaunchScript},
		{"-c after the script is the script's argument", v, a("bash start.sh -c x"), nil, "start.sh", LaunchScript},
		{"an -o argument is not an option bundle", v, a("bash -o c start.sh"), nil, "start.sh", LaunchScript},
		{"bash -o pipefail run", v, a("bash -o pipefail run"), nil, "run", LaunchUnrecognised},
		{"sh vllm is a file sh reads, not the engine", v, a("sh vllm serve"), nil, "vllm", LaunchUnrecognised},

		// Scripts.
		{".sh entrypoint", v, a("/entrypoint.sh"), a("vllm serve"), "entrypoint.sh", LaunchScript},
		{"./start.sh", s, a("./start.sh"), nil, "start.sh", LaunchScript},
		{"tini -- /start.sh", v, a("tini -- /start.sh"), nil, "start.sh", LaunchScript},

		// env -S hides the command line.
		{"env -S", v, a("env -S vllm"), nil, "env", LaunchEnvSplit},
		{"env -SSTRING", v, a("env -Svllm"), nil, "env", LaunchEnvSplit},
		{"env -S with options after its string is still a split command line", v, []string{"env", "-S", "vllm serve"}, a("--model m"), "env", LaunchEnvSplit},
		{"env --split-string with options after its string", v, []string{"env", "--split-string", "vllm serve", "--model"}, nil, "env", LaunchEnvSplit},
		{"env --split-string=", v, a("env --split-string=vllm"), nil, "env", LaunchEnvSplit},
		{"env --split-string abbreviated", v, a("env --split vllm"), nil, "env", LaunchEnvSplit},
		{"env -iS bundle", v, a("env -iS vllm"), nil, "env", LaunchEnvSplit},
		{"/usr/bin/env -S through tini", s, a("tini -- /usr/bin/env -S python3"), nil, "env", LaunchEnvSplit},

		// Args without command; neither.
		{"args without command", v, nil, a("serve m"), "", LaunchNoCommand},
		{"neither command nor args", v, nil, nil, "", LaunchMissing},
		{"empty command and args", s, []string{}, []string{}, "", LaunchMissing},

		// Another engine's program, both directions: never admitted.
		{"sglang on a vLLM Pod", v, a("python3 -m sglang.launch_server"), nil, "python3", LaunchOtherEngine},
		{"sglang on a vLLM-Ascend Pod", asc, a("python3 -u -m sglang.launch_server"), nil, "python3", LaunchOtherEngine},
		{"vllm on an SGLang Pod", s, a("vllm serve"), nil, "vllm", LaunchOtherEngine},
		{"vllm through tini on an SGLang Pod", s, a("tini -- /usr/local/bin/vllm serve"), nil, "vllm", LaunchOtherEngine},
		{"vllm module on an SGLang Pod", s, a("python3 -m vllm.entrypoints.openai.api_server"), nil, "python3", LaunchOtherEngine},

		// Anything else.
		{"entrypoint", v, a("entrypoint"), a("serve"), "entrypoint", LaunchUnrecognised},
		{"run by path", v, a("/usr/local/bin/run"), nil, "run", LaunchUnrecognised},
		{"myapp", s, a("myapp --serve"), nil, "myapp", LaunchUnrecognised},
		{"python3 app.py", s, a("python3 app.py"), nil, "python3", LaunchUnrecognised},
		{"python3 -c", s, a("python3 -c import"), nil, "python3", LaunchUnrecognised},
		{"python3 -- app.py", v, a("python3 -- app.py"), nil, "python3", LaunchUnrecognised},
		{"another module", v, a("python3 -m sglang_router.launch_server"), nil, "python3", LaunchUnrecognised},
		{"a module only close to SGLang's", s, a("python3 -m sglang.launch_server_v2"), nil, "python3", LaunchUnrecognised},
		{"vllm module outside entrypoints", v, a("python3 -m vllm.scripts"), nil, "python3", LaunchUnrecognised},
		{"a name only close to vllm", v, a("vllm-serve"), nil, "vllm-serve", LaunchUnrecognised},
		{"not a launcher seen through", v, a("nohup vllm serve"), nil, "nohup", LaunchUnrecognised},
		{"a launcher option admission does not know", v, a("tini --foo vllm"), nil, "tini", LaunchUnrecognised},
		{"an unknown short option", v, a("timeout -x 30 vllm"), nil, "timeout", LaunchUnrecognised},
		{"an ambiguous long abbreviation", v, a("env --i vllm"), nil, "env", LaunchUnrecognised},
		{"an unknown interpreter option", s, a("python3 --frobnicate -m sglang.launch_server"), nil, "python3", LaunchUnrecognised},
		{"an unknown interpreter short option", s, a("python3 -Z -m sglang.launch_server"), nil, "python3", LaunchUnrecognised},
		{"an empty program", v, []string{""}, a("serve"), "", LaunchIncomplete},
		{"an empty program after a launcher", v, []string{"tini", "--", ""}, nil, "", LaunchIncomplete},

		// Nothing to run.
		{"tini --", v, a("tini --"), nil, "tini", LaunchIncomplete},
		{"tini alone", v, a("tini"), nil, "tini", LaunchIncomplete},
		{"timeout 30", v, a("timeout 30"), nil, "timeout", LaunchIncomplete},
		{"timeout alone", v, a("timeout"), nil, "timeout", LaunchIncomplete},
		{"timeout -s KILL", v, a("timeout -s KILL"), nil, "timeout", LaunchIncomplete},
		{"timeout without a duration", v, a("timeout vllm serve"), nil, "timeout", LaunchIncomplete},
		{"env alone", v, a("env"), nil, "env", LaunchIncomplete},
		{"env assignments alone", v, a("env A=1"), nil, "env", LaunchIncomplete},
		{"env -u without a name", v, a("env -u"), nil, "env", LaunchIncomplete},
		{"env --chdir without a directory", v, a("env --chdir"), nil, "env", LaunchIncomplete},
		{"tini -p without a signal", v, a("tini -p"), nil, "tini", LaunchIncomplete},
		{"dumb-init --", s, a("dumb-init --"), nil, "dumb-init", LaunchIncomplete},
		{"busybox alone", v, a("busybox"), nil, "busybox", LaunchIncomplete},
		{"busybox --list", v, a("busybox --list"), nil, "busybox", LaunchIncomplete},
		{"nested, then nothing", v, a("tini -- env A=1"), nil, "env", LaunchIncomplete},
		{"bash alone", v, a("bash"), nil, "bash", LaunchIncomplete},
		{"sh -e alone", v, a("sh -e"), nil, "sh", LaunchIncomplete},
		{"bash -s reads standard input", v, a("bash -s serve"), nil, "bash", LaunchIncomplete},
		{"python3 alone", s, a("python3"), nil, "python3", LaunchIncomplete},
		{"python3 -u alone", s, a("python3 -u"), nil, "python3", LaunchIncomplete},
		{"python3 -m without a module", s, a("python3 -m"), nil, "python3", LaunchIncomplete},
		{"python3 - reads standard input", s, a("python3 -"), nil, "python3", LaunchIncomplete},
		{"tini -h exits", v, a("tini -h vllm"), nil, "tini", LaunchIncomplete},
		{"dumb-init -V exits", v, a("dumb-init -V vllm"), nil, "dumb-init", LaunchIncomplete},
		{"env --help exits", v, a("env --help"), nil, "env", LaunchIncomplete},
		{"python3 --version exits", s, a("python3 --version"), nil, "python3", LaunchIncomplete},
	}
}

// decision is a Launch without what env launchers do to the environment (TestCheckLaunchEnv
// judges that).
func decision(l Launch) Launch { return Launch{Program: l.Program, Forwarded: l.Forwarded} }

// launchForwardableClass: the classes the declaration admits.
func launchForwardableClass(class string) bool {
	switch class {
	case LaunchNoCommand, LaunchEnvSplit, LaunchScript, LaunchUnrecognised:
		return true
	}
	return false
}

func TestCheckLaunch(t *testing.T) {
	for _, c := range launchCases() {
		t.Run(c.name, func(t *testing.T) {
			l, r := CheckLaunch(c.command, c.args, c.want, launchTestOthers(c.want), false)
			if c.class == "" {
				require.Nil(t, r)
			} else {
				require.NotNil(t, r)
				assert.Equal(t, c.class, r.Class)
				assert.NotEmpty(t, r.Message)
				assert.Equal(t, r.Message, r.Error())
			}
			assert.Equal(t, Launch{Program: c.program}, decision(l), "undeclared: Forwarded is always false")
		})
	}
}

// With the declaration, forwardable refusals are admitted with Forwarded true; recognised
// launches stay Forwarded false (the declaration admitted nothing); the rest stay refused.
func TestCheckLaunchForwarded(t *testing.T) {
	for _, c := range launchCases() {
		t.Run(c.name, func(t *testing.T) {
			l, r := CheckLaunch(c.command, c.args, c.want, launchTestOthers(c.want), true)
			switch {
			case c.class == "":
				require.Nil(t, r)
				assert.Equal(t, Launch{Program: c.program}, decision(l))
			case launchForwardableClass(c.class):
				require.Nil(t, r)
				assert.Equal(t, Launch{Program: c.program, Forwarded: true}, decision(l))
			default:
				require.NotNil(t, r)
				assert.Equal(t, c.class, r.Class)
				assert.Equal(t, Launch{Program: c.program}, l, "a refused launch reports only its program")
			}
		})
	}
}

func TestCheckLaunchForwardedExamples(t *testing.T) {
	v, s := launchTestVLLM, launchTestSGLang
	for _, c := range []struct {
		name          string
		want          Program
		command, args []string
		launch        Launch
		class         string
	}{
		{".sh admitted", v, a("start.sh"), a("serve"), Launch{Program: "start.sh", Forwarded: true}, ""},
		{"args without command admitted", v, nil, a("serve m"), Launch{Program: "", Forwarded: true}, ""},
		{"env -S admitted", v, a("env -S vllm"), nil, Launch{Program: "env", Forwarded: true}, ""},
		{"entrypoint admitted", v, a("entrypoint"), nil, Launch{Program: "entrypoint", Forwarded: true}, ""},
		{"run admitted", v, a("run"), nil, Launch{Program: "run", Forwarded: true}, ""},
		{"myapp admitted", s, a("myapp"), nil, Launch{Program: "myapp", Forwarded: true}, ""},
		{"recognised: the declaration counts for nothing", v, a("vllm serve"), nil, Launch{Program: "vllm"}, ""},
		{"recognised SGLang: the declaration counts for nothing", s, a("python3 -m sglang.launch_server"), nil, Launch{Program: "python3"}, ""},
		{"bash -c still refused", v, a("bash -c vllm"), nil, Launch{Program: "bash"}, LaunchShell},
		{"bash -lc through tini still refused", v, a("tini -- bash -lc vllm"), nil, Launch{Program: "bash"}, LaunchShell},
		{"another engine still refused", s, a("vllm serve"), nil, Launch{Program: "vllm"}, LaunchOtherEngine},
		{"a launcher alone still refused", v, a("tini --"), nil, Launch{Program: "tini"}, LaunchIncomplete},
		{"neither still refused", v, nil, nil, Launch{}, LaunchMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, r := CheckLaunch(c.command, c.args, c.want, launchTestOthers(c.want), true)
			assert.Equal(t, c.launch, decision(l))
			if c.class == "" {
				assert.Nil(t, r)
			} else if assert.NotNil(t, r) {
				assert.Equal(t, c.class, r.Class)
			}
		})
	}
}

func TestCheckLaunchMessages(t *testing.T) {
	v, s := launchTestVLLM, launchTestSGLang
	for _, c := range []struct {
		class         string
		want          Program
		command, args []string
		message       string
	}{
		{LaunchMissing, v, nil, nil,
			`the container sets neither command nor args, so it runs the image's ENTRYPOINT and CMD, which admission cannot see, and appended arguments would replace that CMD; set command to the engine itself, e.g. command: ["vllm"], with the engine's arguments in args. Setting command also replaces the image ENTRYPOINT, which on accelerator images initialises the vendor runtime: keep that initialisation, e.g. through a wrapper that forwards its arguments, declared with kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchNoCommand, s, nil, a("--model-path m"),
			`the container sets args but no command, so its args go to the image's ENTRYPOINT, which admission cannot see, and nothing shows that appended arguments reach SGLang; set command to the engine itself, e.g. command: ["python3", "-m", "sglang.launch_server"]. Setting command also replaces the image ENTRYPOINT, which on accelerator images initialises the vendor runtime: keep that initialisation, e.g. through a wrapper that forwards its arguments, declared with kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchNoCommand, v, nil, a("serve m"),
			`the container sets args but no command, so its args go to the image's ENTRYPOINT, which admission cannot see, and nothing shows that appended arguments reach vLLM; set command to the engine itself, e.g. command: ["vllm"]. Setting command also replaces the image ENTRYPOINT, which on accelerator images initialises the vendor runtime: keep that initialisation, e.g. through a wrapper that forwards its arguments, declared with kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchShell, v, a("bash -o pipefail -c"), a(`exec vllm serve "$@"`),
			`the container runs "bash -o pipefail -c": the -c string is a single argument, so appended arguments become its $0, $1, ... instead of arguments to vLLM, and kvcache.gpustack.ai/launch-args-forwarded does not admit this; run the engine directly, e.g. command: ["vllm"], or through a wrapper script that ends in exec "$@", declared with kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchShell, s, a("tini -- /bin/sh -lc"), a("python3 -m sglang.launch_server"),
			`the container runs "sh -lc" (through tini): the -c string is a single argument, so appended arguments become its $0, $1, ... instead of arguments to SGLang, and kvcache.gpustack.ai/launch-args-forwarded does not admit this; run the engine directly, e.g. command: ["python3", "-m", "sglang.launch_server"], or through a wrapper script that ends in exec "$@", declared with kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchShell, v, a("/entrypoint"), a("sh -c vllm"),
			`the container's launch line runs "sh -c" at args[0]: the -c string is a single argument, so appended arguments become its $0, $1, ... instead of arguments to vLLM, and kvcache.gpustack.ai/launch-args-forwarded does not admit this; run the engine directly, e.g. command: ["vllm"], or through a wrapper script that ends in exec "$@", declared with kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchPositional, s, a("python3 -m sglang.launch_server"), a("--model-path m --"),
			`the container's args[2] is a bare "--": SGLang reads every argument after it as a positional argument, so the flags injection appends would not be read as flags; remove it`},
		{LaunchScript, v, a("/opt/start.sh"), a("serve"),
			`the container runs the script "/opt/start.sh", and admission cannot see whether it passes appended arguments on to vLLM; run the engine directly, e.g. command: ["vllm"], or, if the script forwards its arguments (ends in exec "$@"), declare kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchScript, v, a("bash start.sh"), nil,
			`the container runs the script "start.sh" (through bash), and admission cannot see whether it passes appended arguments on to vLLM; run the engine directly, e.g. command: ["vllm"], or, if the script forwards its arguments (ends in exec "$@"), declare kvcache.gpustack.ai/launch-args-forwarded: "true"`},
		{LaunchEnvSplit, v, a("env -S"), a("vllm serve"),
			`the container runs "env -S", which splits a string into a command line admission cannot see, so nothing shows that appended arguments reach vLLM; run the engine without env -S, e.g. command: ["vllm"], or declare kvcache.gpustack.ai/launch-args-forwarded: "true" if the split command line passes its arguments on`},
		{LaunchIncomplete, v, a("tini --"), nil,
			`the container runs "tini --" with no program after it, so nothing would receive the appended arguments; name vLLM after it, e.g. command: ["tini", "--", "vllm"]`},
		{LaunchIncomplete, s, a("/usr/bin/timeout 30"), nil,
			`the container runs "timeout 30" with no program after it, so nothing would receive the appended arguments; name SGLang after it, e.g. command: ["timeout", "30", "python3", "-m", "sglang.launch_server"]`},
		{LaunchIncomplete, v, a("timeout -s KILL"), nil,
			`the container runs "timeout -s KILL" with no program after it, so nothing would receive the appended arguments; name vLLM after it, e.g. command: ["timeout", "-s", "KILL", "30", "vllm"]`},
		{LaunchIncomplete, v, a("timeout vllm serve"), nil,
			`the container runs "timeout vllm", but timeout takes a DURATION before the program and "vllm" is not one, so it would start nothing; put the duration first, e.g. command: ["timeout", "30", "vllm"]`},
		{LaunchIncomplete, v, a("tini -- env A=1"), nil,
			`the container runs "tini -- env A=1" with no program after it, so nothing would receive the appended arguments; name vLLM after it, e.g. command: ["tini", "--", "env", "A=1", "vllm"]`},
		{LaunchIncomplete, v, a("env -u"), nil,
			`the container runs "env -u", whose option -u lacks its argument, so env starts nothing; give the option its argument and name vLLM after it`},
		{LaunchIncomplete, v, a("tini --"), a("timeout --signal"),
			`the container runs "timeout --signal" (through tini), whose option --signal lacks its argument, so timeout starts nothing; give the option its argument and name vLLM after it`},
		{LaunchIncomplete, v, a("bash"), nil,
			`the container runs "bash" with no script or -c string, so it would read commands from standard input and nothing would receive the appended arguments; run the engine directly, e.g. command: ["vllm"]`},
		{LaunchIncomplete, s, a("python3 -u"), nil,
			`the container runs "python3" with no module or script, so nothing would receive the appended arguments; run the engine, e.g. command: ["python3", "-m", "sglang.launch_server"]`},
		{LaunchIncomplete, v, a("tini -h vllm"), nil,
			`the container runs "tini -h", which prints and exits without starting a program; remove -h`},
		{LaunchIncomplete, v, a("busybox --list"), nil,
			`the container runs "busybox --list", which names no applet and starts no program; run the engine directly, e.g. command: ["vllm"]`},
		{LaunchOtherEngine, v, a("python3 -m sglang.launch_server"), a("--model-path m"),
			`the container runs "python3 -m sglang.launch_server", the program of SGLang, but the Pod declares kvcache.gpustack.ai/engine: vLLM; fix the annotation or the command so that both name the same engine`},
		{LaunchOtherEngine, s, a("tini -- /usr/local/bin/vllm"), a("serve m"),
			`the container runs "/usr/local/bin/vllm" (through tini), the program of vLLM or vLLM-Ascend, but the Pod declares kvcache.gpustack.ai/engine: SGLang; fix the annotation or the command so that both name the same engine`},
		{LaunchUnrecognised, v, a("entrypoint"), a("serve m"),
			`the container runs "entrypoint", which admission does not recognise as vLLM and cannot see into, so nothing shows that appended arguments reach the engine; set command to the engine itself, e.g. command: ["vllm"], or declare kvcache.gpustack.ai/launch-args-forwarded: "true" if entrypoint passes its arguments on`},
		{LaunchUnrecognised, s, a("python3 app.py"), nil,
			`the container runs "python3 app.py", which admission does not recognise as SGLang and cannot see into, so nothing shows that appended arguments reach the engine; set command to the engine itself, e.g. command: ["python3", "-m", "sglang.launch_server"], or declare kvcache.gpustack.ai/launch-args-forwarded: "true" if app.py passes its arguments on`},
		{LaunchUnrecognised, v, a("sh /opt/run"), nil,
			`the container runs "/opt/run" (through sh), which admission does not recognise as vLLM and cannot see into, so nothing shows that appended arguments reach the engine; set command to the engine itself, e.g. command: ["vllm"], or declare kvcache.gpustack.ai/launch-args-forwarded: "true" if run passes its arguments on`},
		{LaunchUnrecognised, v, a("tini --foo vllm"), nil,
			`the container runs "tini" with option --foo, which admission does not know, so it cannot tell which program tini starts; remove the option, or declare kvcache.gpustack.ai/launch-args-forwarded: "true" if the launch passes its arguments on to vLLM`},
	} {
		t.Run(c.class+"/"+strings.Join(slices.Concat(c.command, c.args), " "), func(t *testing.T) {
			_, r := CheckLaunch(c.command, c.args, c.want, launchTestOthers(c.want), false)
			require.NotNil(t, r)
			assert.Equal(t, c.class, r.Class)
			assert.Equal(t, c.message, r.Message)
		})
	}
}

// Every message is one or two sentences, names what the container runs, and states a fix.
func TestCheckLaunchMessageShape(t *testing.T) {
	for _, c := range launchCases() {
		if c.class == "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			_, r := CheckLaunch(c.command, c.args, c.want, launchTestOthers(c.want), false)
			require.NotNil(t, r)
			m := r.Message
			assert.LessOrEqual(t, len(regexp.MustCompile(`\. [A-Z]`).FindAllString(m, -1)), 1, "at most two sentences: %s", m)
			assert.NotContains(t, m, "!")
			assert.False(t, strings.HasSuffix(m, "."), "no final period, like the other refusals: %s", m)
			assert.True(t, strings.HasPrefix(m, "the container"), m)
			assert.Regexp(t, `; (set|run|name|put|remove|fix|give)`, m, "states the fix")
		})
	}
}

func TestCheckLaunchLeavesArgvAlone(t *testing.T) {
	command := make([]string, 2, 8)
	copy(command, []string{"tini", "--"})
	args := []string{"vllm", "serve"}
	l, r := CheckLaunch(command, args, launchTestVLLM, nil, false)
	require.Nil(t, r)
	assert.Equal(t, "vllm", l.Program)
	assert.Equal(t, []string{"tini", "--"}, command)
	assert.Equal(t, []string{"tini", "--", "", ""}, command[:4], "nothing written into spare capacity")
	assert.Equal(t, []string{"vllm", "serve"}, args)
}

func TestCheckLaunchWithoutOthers(t *testing.T) {
	// Without the other engines' programs, another engine's program is merely unrecognised.
	_, r := CheckLaunch(a("vllm serve"), nil, launchTestSGLang, nil, false)
	require.NotNil(t, r)
	assert.Equal(t, LaunchUnrecognised, r.Class)
}

func TestCheckLaunchEnv(t *testing.T) {
	v := launchTestVLLM
	for _, c := range []struct {
		name    string
		command []string
		env     []EnvChange
		clears  string
	}{
		{"no env launcher", a("vllm serve"), nil, ""},
		{"assignments, a value holding =", a("env A=1 B=x=y vllm"), []EnvChange{{Name: "A", Token: "A=1"}, {Name: "B", Token: "B=x=y"}}, ""},
		{"every spelling of unset", a("env -u HOME -uPATH --unset=X --unset Y --u Z vllm"), []EnvChange{
			{Name: "HOME", Token: "-u HOME", Unset: true}, {Name: "PATH", Token: "-uPATH", Unset: true},
			{Name: "X", Token: "--unset=X", Unset: true}, {Name: "Y", Token: "--unset Y", Unset: true}, {Name: "Z", Token: "--u Z", Unset: true},
		}, ""},
		{"-i", a("env -i vllm"), nil, "-i"},
		{"a lone -", a("env - A=1 vllm"), []EnvChange{{Name: "A", Token: "A=1"}}, "-"},
		{"--ignore-environment abbreviated", a("env --ignore-e vllm"), nil, "--ignore-environment"},
		{"nested env launchers, in order", a("env A=1 tini -- busybox env -u B C=3 vllm"), []EnvChange{
			{Name: "A", Token: "A=1"}, {Name: "B", Token: "-u B", Unset: true}, {Name: "C", Token: "C=3"},
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, r := CheckLaunch(c.command, nil, v, launchTestOthers(v), false)
			require.Nil(t, r)
			assert.Equal(t, c.env, l.Env)
			assert.Equal(t, c.clears, l.ClearsEnv)
		})
	}
}

// ArgsAt is where the program's own arguments begin: what comes before it decides what runs.
func TestCheckLaunchSaysWhereTheProgramsOwnArgumentsBegin(t *testing.T) {
	v, s := launchTestVLLM, launchTestSGLang
	for _, c := range []struct {
		name          string
		want          Program
		command, args []string
		forwarded     bool
		at            int
	}{
		{"the program itself", v, a("vllm"), a("serve m"), false, 1},
		{"through launchers", v, a("tini -- env A=1 vllm"), a("serve"), false, 5},
		{"python -m module", s, a("python3 -u -m sglang.launch_server"), a("--model-path m"), false, 4},
		{"python -mmodule", s, a("python3 -msglang.launch_server"), nil, false, 2},
		{"a declared script", v, a("bash /start.sh"), a("serve"), true, 2},
		{"env -S: the split string is env's", v, a("env -S"), a("vllm_serve --port 1"), true, 3},
		{"args without command: all of them", v, nil, a("serve m"), true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, r := CheckLaunch(c.command, c.args, c.want, launchTestOthers(c.want), c.forwarded)
			require.Nil(t, r)
			assert.Equal(t, c.at, l.ArgsAt)
		})
	}
}
