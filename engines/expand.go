package engines

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet expands $(NAME) in a container's command and args from the container's
// environment before the engine's parser sees them, so admission judges the launch line as the
// process receives it. The rules, as the kubelet applies them (written here from its documented
// behaviour, not copied):
//   - "$$" is a literal "$"; "$(NAME)" is NAME's value; a "$" before anything else, a "$(" with no
//     closing ")", and a trailing "$" stay as written; a name the environment does not define
//     stays as written, "$(NAME)".
//   - envFrom sources are read first and env entries after them, in order, so env wins over
//     envFrom and a later entry of one name wins over an earlier one; an env value is expanded
//     with what is defined before it (envFrom and earlier entries), command and args with all of
//     it. Expansion is one pass: a value substituted is not expanded again, and an argument is
//     never split.
//   - The kubelet also defines the service-link variables (<SERVICE>_SERVICE_HOST, ..._PORT),
//     which admission does not list. Their values are addresses and ports, never a flag, so a
//     reference to one judged as the literal "$(NAME)" is judged as what it becomes.

// Unresolved is a variable whose value admission cannot read: taken from a ConfigMap, a Secret,
// a field of the Pod or a resource (valueFrom), or possibly from an envFrom source.
type Unresolved struct {
	Name string
	// Source says where the value comes from, for messages: "valueFrom.configMapKeyRef
	// (ConfigMap engine, key args)", "envFrom (ConfigMap engine-env)".
	Source string
	// FromEnvFrom is true when the name is not declared in env and an envFrom source may define
	// it (then declaring it in env is the fix, since env wins).
	FromEnvFrom bool
	// NotAFlag is true for a value that is always a non-empty address, name or number (the Pod's
	// name or IP, a resource amount; a variable a ModelDeployment's cache attachment writes): it
	// never begins with '-', so where it stands it can begin no flag.
	NotAFlag bool
	// Attachment is true for a variable a ModelDeployment's cache attachment writes with the
	// Binding's value (its admission does not render it).
	Attachment bool
}

// part is a piece of a value: literal text, or a value admission cannot read.
type part struct {
	text string
	ref  *Unresolved
}

// Environment is what $(NAME) reads in one container: the env entries as written (or as
// injection leaves them), and the envFrom sources that may define any other name.
type Environment struct {
	vars    map[string][]part
	envFrom []corev1.EnvFromSource
}

// NewEnvironment resolves env (in order) over envFrom as the kubelet does.
func NewEnvironment(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) Environment {
	e := Environment{vars: map[string][]part{}, envFrom: envFrom}
	for _, v := range env {
		switch {
		case v.Value != "":
			e.vars[v.Name] = e.expand(v.Value)
		case v.ValueFrom != nil:
			e.vars[v.Name] = []part{{ref: fromSource(v.Name, v.ValueFrom)}}
		default:
			e.vars[v.Name] = nil // defined, empty
		}
	}
	return e
}

// WrittenElsewhere marks names whose values are written by something admission does not render
// here (a ModelDeployment's cache attachment) as values that are never a flag: they replace a
// declaration of the same name, as the attachment's variables do.
func (e Environment) WrittenElsewhere(source string, names ...string) Environment {
	vars := make(map[string][]part, len(e.vars)+len(names))
	for k, v := range e.vars {
		vars[k] = v
	}
	for _, n := range names {
		vars[n] = []part{{ref: &Unresolved{Name: n, Source: source, NotAFlag: true, Attachment: true}}}
	}
	return Environment{vars: vars, envFrom: e.envFrom}
}

// Declared reports whether env defines name (so envFrom cannot).
func (e Environment) Declared(name string) bool {
	_, ok := e.vars[name]
	return ok
}

// notAFlagFields are the Pod fields whose values are non-empty names, addresses or numbers.
var notAFlagFields = map[string]bool{
	"metadata.name": true, "metadata.namespace": true, "metadata.uid": true,
	"spec.nodeName": true, "spec.serviceAccountName": true,
	"status.hostIP": true, "status.hostIPs": true, "status.podIP": true, "status.podIPs": true,
}

func fromSource(name string, s *corev1.EnvVarSource) *Unresolved {
	u := &Unresolved{Name: name, Source: "valueFrom"}
	switch {
	case s.FieldRef != nil:
		u.Source = fmt.Sprintf("valueFrom.fieldRef (%s)", s.FieldRef.FieldPath)
		u.NotAFlag = notAFlagFields[s.FieldRef.FieldPath]
	case s.ResourceFieldRef != nil:
		u.Source = fmt.Sprintf("valueFrom.resourceFieldRef (%s)", s.ResourceFieldRef.Resource)
		u.NotAFlag = true
	case s.ConfigMapKeyRef != nil:
		u.Source = fmt.Sprintf("valueFrom.configMapKeyRef (ConfigMap %s, key %s)", s.ConfigMapKeyRef.Name, s.ConfigMapKeyRef.Key)
	case s.SecretKeyRef != nil:
		u.Source = fmt.Sprintf("valueFrom.secretKeyRef (Secret %s, key %s)", s.SecretKeyRef.Name, s.SecretKeyRef.Key)
	case s.FileKeyRef != nil:
		u.Source = fmt.Sprintf("valueFrom.fileKeyRef (key %s)", s.FileKeyRef.Key)
	}
	return u
}

// lookup is what $(name) becomes: its parts, or ok false when the name stays as written.
func (e Environment) lookup(name string) ([]part, bool) {
	if v, ok := e.vars[name]; ok {
		return v, true
	}
	for _, f := range e.envFrom {
		if !strings.HasPrefix(name, f.Prefix) {
			continue
		}
		what := "a source"
		switch {
		case f.ConfigMapRef != nil:
			what = "ConfigMap " + f.ConfigMapRef.Name
		case f.SecretRef != nil:
			what = "Secret " + f.SecretRef.Name
		}
		return []part{{ref: &Unresolved{Name: name, Source: "envFrom (" + what + ")", FromEnvFrom: true}}}, true
	}
	return nil, false
}

// expand reads s as the kubelet does.
func (e Environment) expand(s string) []part {
	var out []part
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, part{text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			text.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			text.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				text.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			i += 2 + end
			v, ok := e.lookup(name)
			if !ok {
				text.WriteString("$(" + name + ")")
				continue
			}
			for _, p := range v {
				if p.ref == nil {
					text.WriteString(p.text)
					continue
				}
				flush()
				out = append(out, p)
			}
		default:
			text.WriteByte('$')
		}
	}
	flush()
	return out
}

// Arg is one argument as the process receives it. Text holds a value admission cannot read as
// the reference "$(NAME)", so every other check reads the argument as the container wrote it
// there; Refs lists those values, with the offset of each in Text.
type Arg struct {
	Text string
	Refs []ArgRef
}

// ArgRef is a value admission cannot read, at byte offset At of its argument's Text.
type ArgRef struct {
	Unresolved
	At int
}

// Expand returns argv as the kubelet hands it to the process.
func (e Environment) Expand(argv []string) []Arg {
	out := make([]Arg, len(argv))
	for i, s := range argv {
		var b strings.Builder
		var a Arg
		for _, p := range e.expand(s) {
			if p.ref == nil {
				b.WriteString(p.text)
				continue
			}
			a.Refs = append(a.Refs, ArgRef{Unresolved: *p.ref, At: b.Len()})
			b.WriteString("$(" + p.ref.Name + ")")
		}
		a.Text = b.String()
		out[i] = a
	}
	return out
}

// Texts are the arguments' texts.
func Texts(args []Arg) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a.Text
	}
	return out
}

// UnseenArg is an argument whose text admission cannot read where a flag could begin.
type UnseenArg struct {
	Index int // in the argv judged
	Arg   Arg
	// Where says what the unread text could be: "at the start of an argument", "in the name of
	// a flag", or "before the engine's own arguments".
	Where string
}

// Unseen lists the arguments of argv in which a value admission cannot read could make a flag
// the engine reads, or change which program runs and with what: every such value in a token
// before argsAt (the program, a launcher, their options), and from argsAt on each one that is
// not provably a value. A value is provably not a flag when the argument's text before it is
// fixed and decides what the parser reads the argument as: a first character other than '-'
// (a positional argument or the value of the option before it: the kubelet never splits an
// argument), or "--name=" or "-n=" (the value of the option named, judged by its name), or when the value
// itself is never a flag (Unresolved.NotAFlag) and nothing fixed before it starts with '-'.
func Unseen(argv []Arg, argsAt int) []UnseenArg {
	var out []UnseenArg
	for i, a := range argv {
		if len(a.Refs) == 0 {
			continue
		}
		if i < argsAt {
			out = append(out, UnseenArg{Index: i, Arg: a, Where: "before the engine's own arguments"})
			continue
		}
		first := a.Refs[0]
		fixed := a.Text[:first.At]
		switch {
		case fixed != "" && fixed[0] != '-':
		case strings.Contains(fixed, "="):
		case fixed == "" && first.NotAFlag:
		case fixed == "":
			out = append(out, UnseenArg{Index: i, Arg: a, Where: "at the start of an argument"})
		default:
			out = append(out, UnseenArg{Index: i, Arg: a, Where: "in the name of a flag"})
		}
	}
	return out
}

// UnseenMessage says why an argument (at where: "args[1]", "the argument") is refused, naming
// the first value in it admission cannot read, and how to fix it.
func (e Engine) UnseenMessage(where string, u UnseenArg) string {
	r := u.Arg.Refs[0]
	ref := "$(" + r.Name + ")"
	subject, source := "env "+r.Name, fmt.Sprintf("takes its value from %s, which admission cannot read", r.Source)
	literal := fmt.Sprintf("give %s a literal value in env", r.Name)
	switch {
	case r.Attachment:
		source = "is written by the cache attachment with the Binding's value"
		literal = ""
	case r.FromEnvFrom:
		subject = r.Name + " (not declared in env)"
		source = fmt.Sprintf("may take its value from %s, which admission cannot read", r.Source)
		literal = fmt.Sprintf("declare %s with a literal value in env (env wins over envFrom)", r.Name)
	case r.NotAFlag:
		literal = ""
	}
	var at, risk string
	switch u.Where {
	case "in the name of a flag":
		at, risk = "in the name of a flag", "so it could make one injection owns or refuses, unseen"
	case "before the engine's own arguments":
		at, risk = fmt.Sprintf("before %s's own arguments", e.Name), "so it could change what runs and with what, unseen"
	default:
		at, risk = "at the start of an argument", "so it could be a flag injection owns or refuses, unseen"
	}
	var fixes []string
	if literal != "" {
		fixes = append(fixes, literal)
	}
	if u.Where != "before the engine's own arguments" {
		fixes = append(fixes, fmt.Sprintf("use %s only as a whole argument that cannot begin with '-' or as a flag's value (--flag=%s)", ref, ref))
		if literal != "" {
			fixes[len(fixes)-1] = fmt.Sprintf("use %s only as a flag's value (--flag=%s)", ref, ref)
		}
	} else if literal == "" {
		fixes = append(fixes, fmt.Sprintf("name the program and the launchers without %s", ref))
	}
	return fmt.Sprintf("%s %q: %s, %s, %s; the kubelet substitutes it before %s parses its arguments, %s; %s",
		where, u.Arg.Text, subject, at, source, e.Name, risk, strings.Join(fixes, ", or "))
}
