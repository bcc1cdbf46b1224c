// Package cloudinit builds the cloud-init disk of a VMI the way KubeVirt
// v1.6.0's virt-launcher does (pkg/cloud-init upstream): an ISO 9660 image
// with Rock Ridge and Joliet names made by xorrisofs (Debian's xorriso),
// labelled "cidata" for NoCloud (user-data, meta-data, network-config) or
// "config-2" for ConfigDrive (openstack/latest/user_data, meta_data.json,
// network_data.json). The metadata is KubeVirt's: JSON with the firmware
// UUID as the NoCloud instance-id, "NAME.NAMESPACE" as the ConfigDrive
// instance_id and the firmware UUID as its uuid.
//
// xorrisofs rather than a Go ISO library: cloud-init finds its files by
// names (user-data, meta_data.json) that plain ISO 9660 cannot hold, so it
// needs Rock Ridge or Joliet, which KubeVirt writes with xorrisofs and the
// Go writers on the module proxy (github.com/kdomanski/iso9660) do not.
package cloudinit

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/internal/confine"
)

// Source is a cloud-init data source.
type Source string

// The two data sources KubeVirt offers.
const (
	NoCloud     Source = "noCloud"
	ConfigDrive Source = "configDrive"
)

// Label is the ISO volume label cloud-init looks for.
func (s Source) Label() string {
	if s == ConfigDrive {
		return "config-2"
	}
	return "cidata"
}

// Data is what goes on a cloud-init disk.
type Data struct {
	Source      Source
	UserData    string
	NetworkData string
	// MetaData is the JSON metadata file.
	MetaData []byte
}

// FieldError names the volume field that cannot be used.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %s: %s", e.Field, e.Msg) }

// KubeVirt's caps on a cloud-init volume's inline data, in bytes after
// base64 decoding (virt-api's VMI admitter, cloudInitUserMaxLen and
// cloudInitNetworkMaxLen): larger data belongs in a Secret.
const (
	UserDataMaxLen    = 2048
	NetworkDataMaxLen = 2048
)

// CheckSize refuses a cloud-init volume's inline userData and networkData
// (plain, or base64 decoded) over KubeVirt's caps, in KubeVirt's words,
// with the first of SizeErrors; field is the volume's path
// (spec.volumes[N]).
func CheckSize(v *v1.Volume, field string) error {
	if errs := SizeErrors(v, field); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// SizeErrors are a cloud-init volume's inline data over KubeVirt's caps,
// userData's then networkData's, as KubeVirt lists both. Bad base64 is
// left to FromVolume.
func SizeErrors(v *v1.Volume, field string) []*FieldError {
	var user, userB64, net, netB64 string
	switch {
	case v.CloudInitNoCloud != nil:
		c := v.CloudInitNoCloud
		field, user, userB64, net, netB64 = field+".cloudInitNoCloud", c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64
	case v.CloudInitConfigDrive != nil:
		c := v.CloudInitConfigDrive
		field, user, userB64, net, netB64 = field+".cloudInitConfigDrive", c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64
	default:
		return nil
	}
	var errs []*FieldError
	for _, d := range []struct {
		plain, b64, name, kind, ref string
		limit                       int
	}{
		{user, userB64, "userData", "userdata", "UserDataSecretRef", UserDataMaxLen},
		{net, netB64, "networkData", "networkdata", "NetworkDataSecretRef", NetworkDataMaxLen},
	} {
		f, n := field+"."+d.name, len(d.plain)
		if d.b64 != "" {
			decoded, err := base64.StdEncoding.DecodeString(d.b64)
			if err != nil {
				continue
			}
			f, n = f+"Base64", max(n, len(decoded))
		}
		if n > d.limit {
			errs = append(errs, &FieldError{Field: f, Msg: fmt.Sprintf("%d bytes: %s %s exceeds %d byte limit. Should use %s for larger data. (allowed: at most %d bytes inline, after base64 decoding; the Secret of a %s is a cluster's, which this launcher cannot read)",
				n, field, d.kind, d.limit, d.ref, d.limit, d.ref)})
		}
	}
	return errs
}

// IsVolume tells whether a volume is a cloud-init volume.
func IsVolume(v *v1.Volume) bool { return v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil }

// FromVolume reads the cloud-init volume v of vmi (spec.domain.firmware.uuid
// already defaulted). field is the volume's path in messages. Secret
// references are refused: there are no cluster secrets here.
func FromVolume(vmi *v1.VirtualMachineInstance, v *v1.Volume, field string) (*Data, error) {
	if err := CheckSize(v, field); err != nil {
		return nil, err
	}
	var (
		src                        Source
		user, userB64, net, netB64 string
		userSecret, netSecret      bool
	)
	switch {
	case v.CloudInitNoCloud != nil:
		c := v.CloudInitNoCloud
		src, field = NoCloud, field+".cloudInitNoCloud"
		user, userB64, net, netB64 = c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64
		userSecret, netSecret = c.UserDataSecretRef != nil, c.NetworkDataSecretRef != nil
	case v.CloudInitConfigDrive != nil:
		c := v.CloudInitConfigDrive
		src, field = ConfigDrive, field+".cloudInitConfigDrive"
		user, userB64, net, netB64 = c.UserData, c.UserDataBase64, c.NetworkData, c.NetworkDataBase64
		userSecret, netSecret = c.UserDataSecretRef != nil, c.NetworkDataSecretRef != nil
	default:
		return nil, &FieldError{Field: field, Msg: "not a cloud-init volume"}
	}
	if userSecret {
		return nil, &FieldError{Field: field + ".secretRef", Msg: "is not supported: the launcher has no cluster secrets to read (put the data in userData or userDataBase64)"}
	}
	if netSecret {
		return nil, &FieldError{Field: field + ".networkDataSecretRef", Msg: "is not supported: the launcher has no cluster secrets to read (put the data in networkData or networkDataBase64)"}
	}
	d := &Data{Source: src}
	var err error
	if d.UserData, err = pick(user, userB64, field+".userData", field+".userDataBase64"); err != nil {
		return nil, err
	}
	if d.NetworkData, err = pick(net, netB64, field+".networkData", field+".networkDataBase64"); err != nil {
		return nil, err
	}
	if d.UserData == "" && d.NetworkData == "" {
		return nil, &FieldError{Field: field + ".userData", Msg: "cloud-init needs userData, userDataBase64, networkData or networkDataBase64"}
	}
	firmwareUUID := ""
	if fw := vmi.Spec.Domain.Firmware; fw != nil {
		firmwareUUID = string(fw.UUID)
	}
	host := Hostname(vmi)
	var meta any
	if src == NoCloud {
		meta = struct {
			InstanceID    string `json:"instance-id"`
			LocalHostname string `json:"local-hostname,omitempty"`
		}{firmwareUUID, host}
	} else {
		meta = struct {
			InstanceID string `json:"instance_id"`
			Hostname   string `json:"hostname,omitempty"`
			UUID       string `json:"uuid,omitempty"`
		}{vmi.Name + "." + vmi.Namespace, host, firmwareUUID}
	}
	if d.MetaData, err = json.Marshal(meta); err != nil {
		return nil, fmt.Errorf("encoding cloud-init metadata: %w", err)
	}
	return d, nil
}

func pick(plain, b64, plainField, b64Field string) (string, error) {
	if plain != "" && b64 != "" {
		return "", &FieldError{Field: b64Field, Msg: "set only one of " + lastPart(plainField) + " and " + lastPart(b64Field)}
	}
	if b64 == "" {
		return plain, nil
	}
	out, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", &FieldError{Field: b64Field, Msg: fmt.Sprintf("not valid base64: %v", err)}
	}
	return string(out), nil
}

func lastPart(f string) string { return f[strings.LastIndex(f, ".")+1:] }

// Hostname is the guest host name KubeVirt gives: spec.hostname, else the
// VMI name, cut to 63 characters.
func Hostname(vmi *v1.VirtualMachineInstance) string {
	h := vmi.Spec.Hostname
	if h == "" {
		h = vmi.Name
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// Files are the paths and contents on the disk.
func (d *Data) Files() map[string][]byte {
	files := map[string][]byte{}
	var user, meta, net string
	if d.Source == ConfigDrive {
		user, meta, net = "openstack/latest/user_data", "openstack/latest/meta_data.json", "openstack/latest/network_data.json"
	} else {
		user, meta, net = "user-data", "meta-data", "network-config"
	}
	files[user] = []byte(d.UserData)
	files[meta] = d.MetaData
	if d.NetworkData != "" {
		files[net] = []byte(d.NetworkData)
	}
	return files
}

// WriteISO writes the disk as the file name (one path component) of the
// folder dir with xorrisofs (as KubeVirt runs it, with a 10 s limit),
// staging the files in a folder next to it that it removes again, and
// returns its path. The ISO and the staged files are made through an
// os.Root of dir (internal/confine), owner-only: they carry the VMI's
// user data.
func (d *Data) WriteISO(ctx context.Context, dir, name string) (string, error) {
	path, err := confine.Join(dir, name)
	if err != nil {
		return "", fmt.Errorf("cloud-init ISO: %w", err)
	}
	stage, err := os.MkdirTemp(dir, ".cloudinit-")
	if err != nil {
		return "", fmt.Errorf("cloud-init staging folder: %w", err)
	}
	defer os.RemoveAll(stage)
	for file, data := range d.Files() {
		names := strings.Split(file, "/")
		if len(names) > 1 {
			if _, err := confine.MkdirAll(stage, 0o700, names[:len(names)-1]...); err != nil {
				return "", fmt.Errorf("cloud-init staging folder: %w", err)
			}
		}
		if _, err := confine.WriteFile(stage, data, 0o600, names...); err != nil {
			return "", fmt.Errorf("writing cloud-init %s: %w", file, err)
		}
	}
	if _, err := confine.Reserve(dir, 0o600, name); err != nil {
		return "", fmt.Errorf("cloud-init ISO: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "xorrisofs", "-output", path, "-volid", d.Source.Label(),
		"-joliet", "-rock", "-partition_cyl_align", "on", stage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cloud-init ISO %s with xorrisofs (Debian package xorriso): %v: %s", path, err, strings.TrimSpace(string(out)))
	}
	return path, nil
}

// volumeLabel reads the volume identifier of an ISO 9660 image from its
// primary volume descriptor (sector 16, bytes 40-71).
func volumeLabel(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	pvd := make([]byte, 2048)
	if _, err := f.ReadAt(pvd, 16*2048); err != nil {
		return "", fmt.Errorf("reading the volume descriptor of %s: %w", path, err)
	}
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		return "", fmt.Errorf("%s is not an ISO 9660 image", path)
	}
	return strings.TrimRight(string(pvd[40:72]), " "), nil
}
