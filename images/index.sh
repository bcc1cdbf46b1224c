# shellcheck shell=bash
# Sourced by the image builds (images/*/build.sh): one way to write images.json.
#
# index_set FILE REF VALUE adds or replaces the entry REF of the image index
# FILE and keeps every other entry, so each build owns only its own line. A
# lock next to the file serialises builds run at once (make -j); the new index
# replaces the old one in one rename.
index_set() {
	local file=$1 key=$2 value=$3 tmp fd
	exec {fd}>"$file.lock"
	flock "$fd"
	tmp=$(mktemp "$file.XXXXXX")
	if [[ -s "$file" ]]; then
		jq --arg k "$key" --arg v "$value" '.[$k] = $v' "$file" >"$tmp"
	else
		jq -n --arg k "$key" --arg v "$value" '{($k): $v}' >"$tmp"
	fi
	chmod 644 "$tmp"
	mv "$tmp" "$file"
	exec {fd}>&-
}
