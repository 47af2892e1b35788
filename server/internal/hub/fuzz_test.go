package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseID: no id, however odd, panics, and an accepted one names a
// folder inside the cache (no "..", no absolute path, no separator in
// the repository folder).
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"Qwen/Qwen3-8B", "org/name@v1", "org/name@refs/pr/1", "../x", "a/b@../../c", "org/name@" + mainCommit, "/etc/passwd", "a/b@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		id, err := ParseID(ref)
		if err != nil {
			return
		}
		cache := "/cache"
		dir := repoDir(cache, id)
		if filepath.Dir(dir) != cache || strings.ContainsAny(id.Org+id.Name, `/\`) {
			t.Fatalf("%q: repository folder %s is not directly in the cache", ref, dir)
		}
		refPath := filepath.Join(dir, "refs", filepath.FromSlash(id.Revision))
		if !strings.HasPrefix(refPath, filepath.Join(dir, "refs")+string(filepath.Separator)) {
			t.Fatalf("%q: ref %s leaves the repository folder", ref, refPath)
		}
	})
}
