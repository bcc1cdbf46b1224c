package nodeagent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	k8sv1 "k8s.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

// runAsOf is who kubelet runs container ctr of pod as: runAsUser and
// runAsGroup from the container's securityContext, else the pod's; the
// pod's fsGroup and supplementalGroups as supplemental groups of every
// container (kubelet's CRI config: fsGroup first). A nil pod or
// container reads as unset.
func runAsOf(pod *k8sv1.Pod, ctr *k8sv1.Container) launchrt.RunAs {
	var r launchrt.RunAs
	if pod == nil {
		return r
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		r.UID, r.GID = psc.RunAsUser, psc.RunAsGroup
		if psc.FSGroup != nil {
			r.Groups = append(r.Groups, *psc.FSGroup)
		}
		r.Groups = append(r.Groups, psc.SupplementalGroups...)
	}
	if ctr != nil && ctr.SecurityContext != nil {
		if sc := ctr.SecurityContext; sc.RunAsUser != nil {
			r.UID = sc.RunAsUser
		}
		if sc := ctr.SecurityContext; sc.RunAsGroup != nil {
			r.GID = sc.RunAsGroup
		}
	}
	return r
}

// fsGroupOf is the pod's fsGroup, nil when it has none (or no pod).
func fsGroupOf(pod *k8sv1.Pod) *int64 {
	if pod == nil || pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// computeOf is the pod's compute container, nil when it has none (or no pod).
func computeOf(pod *k8sv1.Pod) *k8sv1.Container {
	if pod == nil {
		return nil
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == computeContainer {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// podmanRunAs is r as `podman run` flags: --user UID[:GID] and one
// --group-add per supplemental group. runAsGroup without runAsUser has no
// podman form (--user needs a user) and is left to the image's user, as
// is everything when r is zero.
func podmanRunAs(r launchrt.RunAs) []string {
	var args []string
	if r.UID != nil {
		u := strconv.FormatInt(*r.UID, 10)
		if r.GID != nil {
			u += ":" + strconv.FormatInt(*r.GID, 10)
		}
		args = append(args, "--user", u)
	}
	for _, g := range r.Groups {
		args = append(args, "--group-add", strconv.FormatInt(g, 10))
	}
	return args
}

// setVolumeOwnership is kubelet's SetVolumeOwnership for an emptyDir of a
// pod with an fsGroup: every file and folder under dir is group-owned by
// fsGroup and gets read and write for user and group (0660), folders also
// search (0110) and setgid, so that what a container makes there stays
// the pod's group. A nil fsGroup changes nothing.
func setVolumeOwnership(dir string, fsGroup *int64) error {
	if fsGroup == nil {
		return nil
	}
	gid := int(*fsGroup)
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, gid); err != nil {
			return fmt.Errorf("volume ownership: %w", err)
		}
		mode := info.Mode() | 0o660
		if d.IsDir() {
			mode |= os.ModeSetgid | 0o110
		}
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("volume ownership: %w", err)
		}
		return nil
	})
}

// handTo makes the folder dir the container's own when the pod names a
// user: owned by runAsUser (and runAsGroup, else the first supplemental
// group, else left), as the launch folder our launcher writes its console
// log and events into must be; the agent, root, reads it all the same.
func handTo(dir string, r launchrt.RunAs) error {
	if r.UID == nil {
		return nil
	}
	gid := -1
	if r.GID != nil {
		gid = int(*r.GID)
	} else if len(r.Groups) > 0 {
		gid = int(r.Groups[0])
	}
	if err := os.Chown(dir, int(*r.UID), gid); err != nil {
		return fmt.Errorf("handing %s to uid %d: %w", dir, *r.UID, err)
	}
	return nil
}

// userCacheDir is the sub-folder of a shared capability cache for the
// container's user: the launcher writes it, and libvirt's cache files are
// owner-only, so containers of different users do not share one folder.
// base itself is used when the pod names no user.
func userCacheDir(base string, r launchrt.RunAs) string {
	if base == "" || r.UID == nil {
		return base
	}
	return filepath.Join(base, "uid-"+strconv.FormatInt(*r.UID, 10))
}

// prepareUserCacheDir makes userCacheDir(base, r) and hands it to the
// container's user.
func prepareUserCacheDir(base string, r launchrt.RunAs) error {
	dir := userCacheDir(base, r)
	if dir == base {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the capability cache of uid %d: %w", *r.UID, err)
	}
	return handTo(dir, r)
}
