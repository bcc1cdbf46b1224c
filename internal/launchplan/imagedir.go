package launchplan

import "path/filepath"

// ImageDirBeside is the default --image-dir for a launcher binary at exe:
// <dir of the binary>/../images, that is _build/images next to _build/bin
// in a checkout, and /usr/share/crashloop/images beside /usr/bin.
func ImageDirBeside(exe string) string {
	dir := filepath.Dir(filepath.Dir(exe))
	if filepath.Base(filepath.Dir(exe)) == "bin" && dir == "/usr" {
		return "/usr/share/crashloop/images"
	}
	return filepath.Join(dir, "images")
}
