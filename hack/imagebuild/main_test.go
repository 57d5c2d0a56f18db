package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readArchive returns every file of an archive by name.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[hdr.Name] = b
	}
}

func blobOf(t *testing.T, files map[string][]byte, d descriptor, v any) {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Digest[len("sha256:"):]]
	require.True(t, ok, "blob %s in the archive", d.Digest)
	require.NoError(t, json.Unmarshal(b, v))
}

// layerEntries lists a layer's tar entries as name -> header.
func layerEntries(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out[hdr.Name] = hdr
	}
}

func TestImagesAreReproducibleAndExtendable(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin", "app"), []byte("#!/bin/true\n"), 0o755))
	require.NoError(t, os.Link(filepath.Join(root, "bin", "app"), filepath.Join(root, "bin", "app2")))
	require.NoError(t, os.Symlink("app", filepath.Join(root, "bin", "link")))

	opts := func(out string) options {
		o := options{name: "docker.io/example/app:1.0", out: out, mtime: time.Unix(0, 0).UTC()}
		o.layers = listFlag{root}
		o.env = listFlag{"PATH=/bin"}
		require.NoError(t, o.entrypoint.Set(`["/bin/app"]`))
		return o
	}
	first, err := build(opts(filepath.Join(dir, "a.tar")))
	require.NoError(t, err)
	// A new modification time on disk changes nothing: times are clamped.
	require.NoError(t, os.Chtimes(filepath.Join(root, "bin", "app"), time.Now(), time.Now()))
	second, err := build(opts(filepath.Join(dir, "b.tar")))
	require.NoError(t, err)
	assert.Equal(t, first, second, "the same inputs give the same manifest digest")

	files := readArchive(t, filepath.Join(dir, "a.tar"))
	var idx index
	require.NoError(t, json.Unmarshal(files["index.json"], &idx))
	require.Len(t, idx.Manifests, 1)
	assert.Equal(t, "docker.io/example/app:1.0", idx.Manifests[0].Annotations[annotationImageName])
	assert.Equal(t, first, idx.Manifests[0].Digest)
	var m manifest
	blobOf(t, files, idx.Manifests[0], &m)
	require.Len(t, m.Layers, 1)
	layer := layerEntries(t, files["blobs/sha256/"+m.Layers[0].Digest[len("sha256:"):]])
	assert.Equal(t, byte(tar.TypeReg), layer["bin/app"].Typeflag)
	assert.Equal(t, byte(tar.TypeLink), layer["bin/app2"].Typeflag, "hard links stay links")
	assert.Equal(t, "bin/app", layer["bin/app2"].Linkname)
	assert.Equal(t, "app", layer["bin/link"].Linkname)
	assert.Equal(t, "", layer["bin/app"].Uname, "no build-host user names")

	// Extending the image copies its layer and adds one; the configuration carries over.
	extra := filepath.Join(dir, "extra")
	require.NoError(t, os.MkdirAll(filepath.Join(extra, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(extra, "etc", "motd"), []byte("hi\n"), 0o644))
	ext := options{name: "docker.io/example/app-plus:1.0", out: filepath.Join(dir, "c.tar"), base: filepath.Join(dir, "a.tar"),
		layers: listFlag{extra}, env: listFlag{"PATH=/usr/bin", "LANG=C"}, mtime: time.Unix(0, 0).UTC()}
	_, err = build(ext)
	require.NoError(t, err)
	files = readArchive(t, filepath.Join(dir, "c.tar"))
	require.NoError(t, json.Unmarshal(files["index.json"], &idx))
	var m2 manifest
	blobOf(t, files, idx.Manifests[0], &m2)
	require.Len(t, m2.Layers, 2)
	assert.Equal(t, m.Layers[0], m2.Layers[0], "the base layer is reused as is")
	var cfg imageConfig
	blobOf(t, files, m2.Config, &cfg)
	assert.Equal(t, []string{"/bin/app"}, cfg.Config.Entrypoint)
	assert.Equal(t, []string{"PATH=/usr/bin", "LANG=C"}, cfg.Config.Env, "-env replaces the base's variable of the same name")
	assert.Len(t, cfg.RootFS.DiffIDs, 2)
}

func TestShortNamesAreRefused(t *testing.T) {
	for _, name := range []string{"example/app:1.0", "app:1.0", "docker.io/example/app"} {
		_, _, err := splitRef(name)
		assert.Error(t, err, name)
	}
	ref, tag, err := splitRef("localhost:5000/app:2")
	require.NoError(t, err)
	assert.Equal(t, "localhost:5000/app:2", ref)
	assert.Equal(t, "2", tag)
}
