// Command imagebuild writes a container image as an OCI image-layout archive without a container
// engine or a registry: each layer is an uncompressed tar of a directory as it is on disk, and the
// archive names the image with its fully qualified reference, which `ctr images import` uses as
// is. hack/images.sh builds the project's images with it.
//
//	imagebuild -name docker.io/org/app:1.0 -out app.tar -layer rootfs/ \
//	    -entrypoint '["/app"]' -user 65532:65532 -env PATH=/usr/bin
//
// An image can extend another archive written by this command (-base): the base's layers are
// copied, not rebuilt, so a derived image costs only its own layer. Modification times are
// clamped (-mtime) and files are written in lexical order, so the same inputs give the same
// digests and an unchanged image is never imported twice.
//
// The manifest digest is printed on stdout.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
	// containerd reads this annotation as the image's full name.
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
	// Bigger blobs in a base archive are layers; they are streamed, never held in memory.
	smallBlob = 4 << 20
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
	RootFS       rootFS    `json:"rootfs"`
	History      []history `json:"history,omitempty"`
}

type runConfig struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// jsonList is a flag holding a JSON array of strings (an entrypoint or a command). Set but
// empty ("[]") clears what the base image had.
type jsonList struct {
	set bool
	v   []string
}

func (j *jsonList) String() string { b, _ := json.Marshal(j.v); return string(b) }
func (j *jsonList) Set(s string) error {
	if err := json.Unmarshal([]byte(s), &j.v); err != nil {
		return fmt.Errorf("want a JSON array of strings, like [\"/app\",\"run\"]: %w", err)
	}
	j.set = true
	return nil
}

type options struct {
	name, out, base, user, workdir string
	layers, env, labels            listFlag
	entrypoint, cmd                jsonList
	mtime                          time.Time
}

func main() {
	var o options
	var mtime int64
	flag.StringVar(&o.name, "name", "", "fully qualified image reference, e.g. docker.io/org/app:1.0 (required)")
	flag.StringVar(&o.out, "out", "", "archive to write (required)")
	flag.StringVar(&o.base, "base", "", "archive written by imagebuild to extend")
	flag.Var(&o.layers, "layer", "directory to add as a layer (repeatable, in order)")
	flag.Var(&o.env, "env", "KEY=VALUE for the image environment; replaces the base's KEY (repeatable)")
	flag.Var(&o.labels, "label", "KEY=VALUE image label (repeatable)")
	flag.Var(&o.entrypoint, "entrypoint", "entrypoint as a JSON array")
	flag.Var(&o.cmd, "cmd", "command as a JSON array")
	flag.StringVar(&o.user, "user", "", "user[:group] the image runs as")
	flag.StringVar(&o.workdir, "workdir", "", "working directory")
	flag.Int64Var(&mtime, "mtime", 0, "modification time (Unix seconds) of every file in the new layers")
	flag.Parse()
	o.mtime = time.Unix(mtime, 0).UTC()
	if o.name == "" || o.out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	digest, err := build(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebuild %s: %v\n", o.name, err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

// blob is content destined for blobs/sha256/ of the archive: in memory, a temporary file, or a
// range of the base archive.
type blob struct {
	desc descriptor
	data []byte
	file string
}

func build(o options) (string, error) {
	ref, tag, err := splitRef(o.name)
	if err != nil {
		return "", err
	}
	cfg := imageConfig{Architecture: runtime.GOARCH, OS: "linux", RootFS: rootFS{Type: "layers"}}
	var layers []blob
	if o.base != "" {
		if cfg, layers, err = readBase(o.base); err != nil {
			return "", fmt.Errorf("base %s: %w", o.base, err)
		}
	}
	created := o.mtime.Format(time.RFC3339)
	cfg.Created = created

	tmpDir, err := os.MkdirTemp(filepath.Dir(o.out), ".imagebuild-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmpDir)
	for i, dir := range o.layers {
		b, err := writeLayer(dir, filepath.Join(tmpDir, fmt.Sprintf("layer-%d", i)), o.mtime)
		if err != nil {
			return "", fmt.Errorf("layer %s: %w", dir, err)
		}
		layers = append(layers, b)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, b.desc.Digest)
		cfg.History = append(cfg.History, history{Created: created, CreatedBy: "imagebuild -layer " + filepath.Base(filepath.Clean(dir))})
	}
	if len(layers) == 0 {
		return "", errors.New("no layers: give -layer or -base")
	}
	if err := applyConfig(&cfg.Config, o); err != nil {
		return "", err
	}

	cfgBlob, err := jsonBlob(mediaConfig, cfg)
	if err != nil {
		return "", err
	}
	m := manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: cfgBlob.desc}
	for _, l := range layers {
		m.Layers = append(m.Layers, l.desc)
	}
	manBlob, err := jsonBlob(mediaManifest, m)
	if err != nil {
		return "", err
	}
	idxDesc := manBlob.desc
	idxDesc.Platform = &platform{Architecture: cfg.Architecture, OS: cfg.OS}
	idxDesc.Annotations = map[string]string{annotationImageName: ref, annotationRefName: tag}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{idxDesc}})
	if err != nil {
		return "", err
	}

	tmpOut := filepath.Join(tmpDir, "archive.tar")
	if err := writeArchive(tmpOut, o.base, append(layers, cfgBlob, manBlob), idx, o.mtime); err != nil {
		return "", err
	}
	if err := os.Rename(tmpOut, o.out); err != nil {
		return "", err
	}
	return manBlob.desc.Digest, nil
}

// splitRef checks that name is fully qualified (a registry host, a repository and a tag) and
// returns it with its tag. containerd would file a short name under docker.io/, and then a Pod
// naming the short form finds no image.
func splitRef(name string) (string, string, error) {
	slash := strings.Index(name, "/")
	colon := strings.LastIndex(name, ":")
	if slash < 0 || !strings.ContainsAny(name[:slash], ".:") && name[:slash] != "localhost" {
		return "", "", fmt.Errorf("-name %q is not fully qualified: start it with the registry host (docker.io/%s)", name, name)
	}
	if colon < slash || colon == len(name)-1 {
		return "", "", fmt.Errorf("-name %q has no tag", name)
	}
	return name, name[colon+1:], nil
}

func applyConfig(c *runConfig, o options) error {
	for _, kv := range o.env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("-env %q: want KEY=VALUE", kv)
		}
		c.Env = append(slices.DeleteFunc(c.Env, func(e string) bool { return strings.HasPrefix(e, k+"=") }), kv)
	}
	for _, kv := range o.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("-label %q: want KEY=VALUE", kv)
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[k] = v
	}
	if o.entrypoint.set {
		c.Entrypoint = o.entrypoint.v
	}
	if o.cmd.set {
		c.Cmd = o.cmd.v
	}
	if o.user != "" {
		c.User = o.user
	}
	if o.workdir != "" {
		c.WorkingDir = o.workdir
	}
	return nil
}

func jsonBlob(mediaType string, v any) (blob, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	sum := sha256.Sum256(b)
	return blob{desc: descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}, data: b}, nil
}

// writeLayer tars dir into file and returns the layer. Ownership and modes are taken from disk
// (the caller prepares the tree as the image should have it); device nodes, sockets and pipes
// are left out (the runtime provides /dev); hard links stay hard links.
func writeLayer(dir, file string, mtime time.Time) (blob, error) {
	f, err := os.Create(file)
	if err != nil {
		return blob{}, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
			return nil
		}
		link := ""
		if mode&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		// Names of the build host's users mean nothing in the image; ids are what counts.
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = mtime, time.Time{}, time.Time{}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if mode.IsRegular() && st.Nlink > 1 {
				key := inode{st.Dev, st.Ino}
				if first, ok := seen[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = hdr.Name
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		n, err := io.Copy(tw, src)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed size while being read", path)
		}
		return err
	})
	if err != nil {
		return blob{}, err
	}
	if err := tw.Close(); err != nil {
		return blob{}, err
	}
	if err := f.Close(); err != nil {
		return blob{}, err
	}
	return blob{desc: descriptor{MediaType: mediaLayer, Digest: digestOf(h), Size: cw.n}, file: file}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// readBase returns the configuration and the layers of an archive this command wrote. Layer
// contents stay in the archive: writeArchive copies them from there.
func readBase(path string) (imageConfig, []blob, error) {
	var cfg imageConfig
	small := map[string][]byte{}
	sizes := map[string]int64{}
	var idx index
	f, err := os.Open(path)
	if err != nil {
		return cfg, nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cfg, nil, err
		}
		switch {
		case hdr.Name == "index.json":
			if err := json.NewDecoder(tr).Decode(&idx); err != nil {
				return cfg, nil, fmt.Errorf("index.json: %w", err)
			}
		case strings.HasPrefix(hdr.Name, "blobs/sha256/"):
			d := "sha256:" + strings.TrimPrefix(hdr.Name, "blobs/sha256/")
			sizes[d] = hdr.Size
			if hdr.Size <= smallBlob {
				b, err := io.ReadAll(tr)
				if err != nil {
					return cfg, nil, err
				}
				small[d] = b
			}
		}
	}
	if len(idx.Manifests) != 1 {
		return cfg, nil, fmt.Errorf("want one manifest in index.json, found %d", len(idx.Manifests))
	}
	var m manifest
	if err := json.Unmarshal(small[idx.Manifests[0].Digest], &m); err != nil {
		return cfg, nil, fmt.Errorf("manifest %s: %w", idx.Manifests[0].Digest, err)
	}
	if err := json.Unmarshal(small[m.Config.Digest], &cfg); err != nil {
		return cfg, nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	var layers []blob
	for _, l := range m.Layers {
		if sizes[l.Digest] != l.Size {
			return cfg, nil, fmt.Errorf("layer %s is missing or truncated", l.Digest)
		}
		layers = append(layers, blob{desc: l})
	}
	return cfg, layers, nil
}

// writeArchive writes the OCI image layout: oci-layout, the blobs, index.json last. Blobs with
// neither data nor a file come from the base archive.
func writeArchive(out, base string, blobs []blob, idx []byte, mtime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, r, size)
		return err
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := put("oci-layout", int64(len(layout)), bytes.NewReader(layout)); err != nil {
		return err
	}
	written := map[string]bool{}
	var fromBase []string
	for _, b := range blobs {
		if b.data == nil && b.file == "" {
			fromBase = append(fromBase, b.desc.Digest)
		}
	}
	if len(fromBase) > 0 {
		if err := copyBaseBlobs(tw, base, fromBase, mtime, written); err != nil {
			return err
		}
	}
	for _, b := range blobs {
		if written[b.desc.Digest] {
			continue
		}
		name := "blobs/sha256/" + strings.TrimPrefix(b.desc.Digest, "sha256:")
		switch {
		case b.data != nil:
			err = put(name, b.desc.Size, bytes.NewReader(b.data))
		case b.file != "":
			var src *os.File
			if src, err = os.Open(b.file); err == nil {
				err = put(name, b.desc.Size, src)
				src.Close()
			}
		default:
			err = fmt.Errorf("blob %s not found in the base archive", b.desc.Digest)
		}
		if err != nil {
			return err
		}
		written[b.desc.Digest] = true
	}
	if err := put("index.json", int64(len(idx)), bytes.NewReader(idx)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func copyBaseBlobs(tw *tar.Writer, base string, digests []string, mtime time.Time, written map[string]bool) error {
	want := map[string]bool{}
	for _, d := range digests {
		want["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] = true
	}
	f, err := os.Open(base)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if !want[hdr.Name] {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: hdr.Name, Mode: 0o644, Size: hdr.Size, ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, tr, hdr.Size); err != nil {
			return err
		}
		written["sha256:"+strings.TrimPrefix(hdr.Name, "blobs/sha256/")] = true
		names = append(names, hdr.Name)
	}
	if len(names) != len(want) {
		slices.Sort(names)
		return fmt.Errorf("base archive holds %d of its %d layers (%v)", len(names), len(want), names)
	}
	return nil
}
