package hub

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// configFile is the one file kvscope reads from a model repository.
const configFile = "config.json"

// repoDir is a model repository's folder in the cache:
// models--{org}--{name}.
func repoDir(cache string, id ID) string {
	return filepath.Join(cache, "models--"+id.Org+"--"+id.Name)
}

// readCache returns the config.json the cache holds for id, the commit it
// is at and its path; found is false when the cache holds none.
func readCache(cache string, id ID) (data []byte, commit, path string, found bool, err error) {
	dir := repoDir(cache, id)
	commit = id.Revision
	if !isCommit(commit) {
		ref, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(id.Revision)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", "", false, nil
		}
		if err != nil {
			return nil, "", "", false, fmt.Errorf("hub cache: %w", err)
		}
		commit = strings.TrimSpace(string(ref))
		if !isCommit(commit) {
			return nil, "", "", false, fmt.Errorf("hub cache: %s holds %q, not a commit hash", filepath.Join(dir, "refs", id.Revision), commit)
		}
	}
	path = filepath.Join(dir, "snapshots", commit, configFile)
	data, err = readCapped(path, MaxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", "", false, nil
	}
	if err != nil {
		return nil, "", "", false, fmt.Errorf("hub cache: %w", err)
	}
	return data, commit, path, true, nil
}

// readCapped reads a file of at most limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than the %d-byte limit", path, limit)
	}
	return data, nil
}

// writeCache stores a fetched config.json as huggingface_hub lays it out:
// snapshots/{commit}/config.json, and refs/{revision} holding the commit
// when the revision is a branch or tag. Each file is written to a
// temporary file beside it and renamed, so a reader never sees half.
func writeCache(cache string, id ID, commit string, data []byte) (string, error) {
	dir := repoDir(cache, id)
	path := filepath.Join(dir, "snapshots", commit, configFile)
	if err := writeAtomic(path, data); err != nil {
		return "", fmt.Errorf("hub cache: %w", err)
	}
	if id.Revision != commit {
		if err := writeAtomic(filepath.Join(dir, "refs", filepath.FromSlash(id.Revision)), []byte(commit)); err != nil {
			return "", fmt.Errorf("hub cache: %w", err)
		}
	}
	return path, nil
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// cachedIDs lists the models the cache holds a config.json of, as
// "org/name", sorted.
func cachedIDs(cache string) []string {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok || !e.IsDir() {
			continue
		}
		org, name, ok := strings.Cut(rest, "--")
		if !ok {
			continue
		}
		snaps, _ := filepath.Glob(filepath.Join(cache, e.Name(), "snapshots", "*", configFile))
		if len(snaps) > 0 {
			out = append(out, org+"/"+name)
		}
	}
	sort.Strings(out)
	return out
}
