package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

var certLog = log.Log.WithName("webhook-certificate")

// Keys of the self-managed certificate Secret (the rotator's defaults).
const (
	secretCertKey = "tls.crt"
	secretKeyKey  = "tls.key"
)

// servingCert is the webhook server's certificate in self-managed mode, read straight from the
// Secret the rotator writes. A Secret volume reaches the Pod only when the kubelet next syncs
// it (tens of seconds to minutes after the rotator's first write), so a replica that waited for
// the mounted file would stay unready that long; this one serves as soon as the Secret holds a
// valid pair, and follows every rotation the same way.
//
// It also writes the pair into dir: the rotator treats a certificate that never appears in its
// CertDir as a failed mount and stops the process.
type servingCert struct {
	config  *rest.Config
	scheme  *runtime.Scheme
	secret  types.NamespacedName
	dir     string
	started time.Time

	cur    atomic.Pointer[loadedCert]
	loaded chan struct{}
	once   sync.Once
}

// loadedCert is the pair being served and the Secret bytes it was parsed from.
type loadedCert struct {
	pair     *tls.Certificate
	crt, key []byte
}

func newServingCert(config *rest.Config, scheme *runtime.Scheme, secret types.NamespacedName, dir string) *servingCert {
	return &servingCert{config: config, scheme: scheme, secret: secret, dir: dir, started: time.Now(), loaded: make(chan struct{})}
}

// NeedLeaderElection is false: every replica serves the webhooks, so every replica needs the
// certificate.
func (s *servingCert) NeedLeaderElection() bool { return false }

// Start watches the one Secret (a field selector on its name) until ctx ends.
func (s *servingCert) Start(ctx context.Context) error {
	c, err := cache.New(s.config, cache.Options{
		Scheme:            s.scheme,
		DefaultNamespaces: map[string]cache.Config{s.secret.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", s.secret.Name)},
		},
	})
	if err != nil {
		return fmt.Errorf("watch the certificate Secret %s: %w", s.secret, err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watch the certificate Secret %s: %w", s.secret, err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.update,
		UpdateFunc: func(_, obj any) { s.update(obj) },
	}); err != nil {
		return err
	}
	return c.Start(ctx)
}

func (s *servingCert) update(obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok || secret.Name != s.secret.Name {
		return
	}
	crt, key := secret.Data[secretCertKey], secret.Data[secretKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return // the chart creates the Secret empty; the rotator fills it
	}
	if cur := s.cur.Load(); cur != nil && string(cur.crt) == string(crt) && string(cur.key) == string(key) {
		return // a resync, or a change to another key
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		certLog.Error(err, "the webhook certificate Secret holds no usable key pair; serving the previous one", "secret", s.secret.String())
		return
	}
	s.cur.Store(&loadedCert{pair: &pair, crt: crt, key: key})
	for name, data := range map[string][]byte{secretCertKey: crt, secretKeyKey: key} {
		if err := writeFileAtomic(s.dir, name, data); err != nil {
			certLog.Error(err, "writing the webhook certificate into the cert dir", "dir", s.dir)
		}
	}
	s.once.Do(func() {
		certLog.Info("serving the webhook certificate from its Secret", "secret", s.secret.String(), "sinceStart", time.Since(s.started).Round(time.Millisecond).String())
		close(s.loaded)
	})
}

// GetCertificate is the webhook server's tls.Config.GetCertificate.
func (s *servingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cur.Load(); c != nil {
		return c.pair, nil
	}
	return nil, errNoCertificate
}

var errNoCertificate = errors.New("no webhook serving certificate yet")

// Ready reports whether a certificate is being served.
func (s *servingCert) Ready() error {
	if s.cur.Load() == nil {
		return fmt.Errorf("the webhook serving certificate is not in Secret %s yet", s.secret)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data (owner-only), so a reader never sees half a file.
func writeFileAtomic(dir, name string, data []byte) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}
