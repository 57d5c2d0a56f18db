package engines

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

func literal(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func fromConfigMap(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "engine"}, Key: "k"}}}
}

func fromField(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func TestEnvironmentExpandsAsTheKubeletDoes(t *testing.T) {
	cm := []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}}}}
	prefixed := []corev1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}}}}
	for _, c := range []struct {
		name    string
		env     []corev1.EnvVar
		envFrom []corev1.EnvFromSource
		arg     string
		want    string
		refs    []string
	}{
		{"a defined name is its value", []corev1.EnvVar{literal("A", "--x=1")}, nil, "$(A)", "--x=1", nil},
		{"text around a reference stays", []corev1.EnvVar{literal("A", "b")}, nil, "a$(A)c", "abc", nil},
		{"$$ is a literal $ and escapes a reference", []corev1.EnvVar{literal("A", "x")}, nil, "$$(A)", "$(A)", nil},
		{"$$$(A) is a $ then A", []corev1.EnvVar{literal("A", "x")}, nil, "$$$(A)", "$x", nil},
		{"an undefined name stays as written", nil, nil, "$(NOPE)", "$(NOPE)", nil},
		{"a $ before anything else stays", nil, nil, "$A $1 a$", "$A $1 a$", nil},
		{"a reference with no ')' stays as written", []corev1.EnvVar{literal("A", "x")}, nil, "$(A", "$(A", nil},
		{"a name runs to the first ')'", []corev1.EnvVar{literal("A", "x")}, nil, "$(A $(A)", "$(A $(A)", nil},
		{"after an unclosed '$(' the text is read on", []corev1.EnvVar{literal("A", "x")}, nil, "$($$", "$($", nil},
		{"an empty name stays as written", nil, nil, "$()", "$()", nil},
		{"a defined empty value is empty", []corev1.EnvVar{{Name: "A"}}, nil, "--x$(A)", "--x", nil},
		{"expansion is one pass: a substituted value is not expanded again", []corev1.EnvVar{literal("A", "$$(B)"), literal("B", "no")}, nil, "$(A)", "$(B)", nil},
		{"an env value reads the entries before it", []corev1.EnvVar{literal("A", "1"), literal("B", "$(A)2")}, nil, "$(B)", "12", nil},
		{"an env value does not read the entries after it", []corev1.EnvVar{literal("B", "$(A)2"), literal("A", "1")}, nil, "$(B)", "$(A)2", nil},
		{"the last entry of a name is what args read", []corev1.EnvVar{literal("A", "1"), literal("A", "2")}, nil, "$(A)", "2", nil},
		{"a value from a ConfigMap is unread", []corev1.EnvVar{fromConfigMap("A")}, nil, "x$(A)", "x$(A)", []string{"A"}},
		{"an unread value carried through another variable stays unread", []corev1.EnvVar{fromConfigMap("A"), literal("B", "--y=$(A)")}, nil, "$(B)", "--y=$(A)", []string{"A"}},
		{"a name env does not declare may come from envFrom", nil, cm, "$(A)", "$(A)", []string{"A"}},
		{"env wins over envFrom", []corev1.EnvVar{literal("A", "1")}, cm, "$(A)", "1", nil},
		{"an envFrom prefix limits the names it may define", nil, prefixed, "$(A)$(CM_A)", "$(A)$(CM_A)", []string{"CM_A"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := NewEnvironment(c.env, c.envFrom).Expand([]string{c.arg})[0]
			assert.Equal(t, c.want, got.Text)
			var refs []string
			for _, r := range got.Refs {
				refs = append(refs, r.Name)
				assert.Equal(t, "$("+r.Name+")", got.Text[r.At:r.At+len(r.Name)+3], "At points at the reference")
			}
			assert.Equal(t, c.refs, refs)
		})
	}
}

func TestUnseenRefusesAValueAdmissionCannotReadOnlyWhereItCouldBeAFlag(t *testing.T) {
	env := NewEnvironment([]corev1.EnvVar{
		fromConfigMap("CM"), fromField("IP", "status.podIP"), fromField("LABEL", "metadata.labels['x']"), literal("KNOWN", "--kv-cache-dtype"),
	}, nil)
	for _, c := range []struct {
		name   string
		argv   []string
		argsAt int
		want   []string // Where of each argument refused, in order
	}{
		{"a whole argument", []string{"vllm", "$(CM)"}, 1, []string{"at the start of an argument"}},
		{"the name of a long flag", []string{"vllm", "--kv-$(CM)"}, 1, []string{"in the name of a flag"}},
		{"the name of a short option", []string{"vllm", "-$(CM)"}, 1, []string{"in the name of a flag"}},
		{"a flag's value after =", []string{"vllm", "--model=$(CM)", "-m=$(CM)"}, 1, nil},
		{"after a fixed first character other than '-'", []string{"vllm", "models/$(CM)", "x$(CM)"}, 1, nil},
		{"the value token after a flag starts with the value", []string{"vllm", "--model", "$(CM)"}, 1, []string{"at the start of an argument"}},
		{"the Pod's IP is never a flag", []string{"vllm", "--host", "$(IP)", "$(IP):8000"}, 1, nil},
		{"the Pod's IP in a flag's name is", []string{"vllm", "--h$(IP)"}, 1, []string{"in the name of a flag"}},
		{"a label is any text", []string{"vllm", "$(LABEL)"}, 1, []string{"at the start of an argument"}},
		{"a known value is judged as the text it is, elsewhere", []string{"vllm", "$(KNOWN)"}, 1, nil},
		{"anything before the engine's own arguments", []string{"env", "A=$(IP)", "x$(CM)", "vllm"}, 3, []string{"before the engine's own arguments", "before the engine's own arguments"}},
		{"the program itself", []string{"$(CM)", "serve"}, 1, []string{"before the engine's own arguments"}},
		{"an undefined name is literal text", []string{"vllm", "$(NOPE)"}, 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, u := range Unseen(env.Expand(c.argv), c.argsAt) {
				got = append(got, u.Where)
			}
			assert.Equal(t, c.want, got)
		})
	}
}

func TestUnseenMessagesNameTheVariableAndTheFix(t *testing.T) {
	env := NewEnvironment([]corev1.EnvVar{fromConfigMap("EXTRA")}, []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}}}})
	attached := NewEnvironment(nil, nil).WrittenElsewhere("the cache attachment", "MOONCAKE_MASTER")
	for _, c := range []struct {
		name string
		env  Environment
		argv []string
		want string
	}{
		{"valueFrom", env, []string{"$(EXTRA)"},
			`args[0] "$(EXTRA)": env EXTRA, at the start of an argument, takes its value from valueFrom.configMapKeyRef (ConfigMap engine, key k), which admission cannot read; the kubelet substitutes it before SGLang parses its arguments, so it could be a flag injection owns or refuses, unseen; give EXTRA a literal value in env, or use $(EXTRA) only as a flag's value (--flag=$(EXTRA))`},
		{"envFrom", env, []string{"--x$(TOKEN)"},
			`args[0] "--x$(TOKEN)": TOKEN (not declared in env), in the name of a flag, may take its value from envFrom (Secret hf), which admission cannot read; the kubelet substitutes it before SGLang parses its arguments, so it could make one injection owns or refuses, unseen; declare TOKEN with a literal value in env (env wins over envFrom), or use $(TOKEN) only as a flag's value (--flag=$(TOKEN))`},
		{"the attachment's variable", attached, []string{"--kv$(MOONCAKE_MASTER)"},
			`args[0] "--kv$(MOONCAKE_MASTER)": env MOONCAKE_MASTER, in the name of a flag, is written by the cache attachment with the Binding's value; the kubelet substitutes it before SGLang parses its arguments, so it could make one injection owns or refuses, unseen; use $(MOONCAKE_MASTER) only as a whole argument that cannot begin with '-' or as a flag's value (--flag=$(MOONCAKE_MASTER))`},
	} {
		t.Run(c.name, func(t *testing.T) {
			us := Unseen(c.env.Expand(c.argv), 0)
			if assert.Len(t, us, 1) {
				assert.Equal(t, c.want, SGLang.UnseenMessage("args[0]", us[0]))
			}
		})
	}
}
