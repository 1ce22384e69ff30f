<?php
// Generates seed000_golden.json: the decisions of seed 000's own PHP
// functions (section 3.2, verbatim in behaviour) for many users and rules.
// graygate's "hash": "crc32" mode must reproduce every one of them.
// Regenerate with: php seed000_golden.php > seed000_golden.json

function hashToBucket(string $seed): int { return crc32($seed) % 1000; }

function shouldGrayRelease(array $rule, string $userId): bool {
    $whiteList = $rule['white_list'] ?? [];
    if (in_array('uid:' . $userId, $whiteList, true)) { return true; }
    $percent = intval($rule['gray_percent'] ?? 0);
    if ($percent <= 0) { return false; }
    if ($percent >= 100) { return true; }
    $bucket = hashToBucket($userId . '_' . ($rule['key'] ?? 'gray'));
    return $bucket < $percent * 10;
}

function getAbGroup(array $rule, string $userId): ?string {
    $groups = $rule['groups'] ?? [];
    if (empty($groups)) { return null; }
    $total = 0;
    foreach ($groups as $group) { $total += intval($group['weight'] ?? 0); }
    if ($total <= 0) { return null; }
    $bucket = hashToBucket($userId . '_' . ($rule['experiment_id'] ?? 'ab'));
    $hit = ($bucket / 1000) * $total;
    foreach ($groups as $group) {
        if ($hit < intval($group['weight'])) { return $group['name']; }
        $hit -= intval($group['weight']);
    }
    return $groups[count($groups) - 1]['name'];
}

$users = [];
for ($i = 0; $i < 400; $i++) { $users[] = (string)(10000 + $i * 7); }
foreach (['alice', 'bob', 'ip_127.0.0.1', '用户甲', 'ユーザー', 'Ünïcødé', 'a b', '', 'x' . str_repeat('y', 60)] as $u) { $users[] = $u; }

$grays = [];
foreach (['gray_v2', 'user_center', 'k.1'] as $key) {
    foreach ([0, 1, 5, 10, 12, 33, 50, 99, 100] as $p) {
        $grays[] = ['key' => $key, 'type' => 'gray', 'hash' => 'crc32', 'gray_percent' => $p,
            'white_list' => ['uid:10007', 'uid:用户甲'],
            'targets' => ['gray' => '127.0.0.1:2', 'stable' => '127.0.0.1:1']];
    }
}
$abs = [];
$weightSets = [[50, 50], [10, 90], [33, 33, 34], [0, 100], [20, 30, 50], [1, 99], [100]];
foreach (['exp_user_center_202405', 'exp2'] as $exp) {
    foreach ($weightSets as $ws) {
        $groups = [];
        foreach ($ws as $i => $w) { $groups[] = ['name' => chr(65 + $i), 'weight' => $w, 'target' => '127.0.0.1:' . (10 + $i)]; }
        $abs[] = ['key' => 'ab_' . $exp . '_' . implode('_', $ws), 'type' => 'ab', 'hash' => 'crc32', 'experiment_id' => $exp, 'groups' => $groups];
    }
}

$out = ['users' => $users, 'gray' => [], 'ab' => []];
foreach ($grays as $r) {
    $d = [];
    foreach ($users as $u) { $d[] = shouldGrayRelease($r, $u); }
    $out['gray'][] = ['rule' => $r, 'gray' => $d];
}
foreach ($abs as $r) {
    $d = [];
    foreach ($users as $u) { $d[] = getAbGroup($r, $u); }
    $out['ab'][] = ['rule' => $r, 'group' => $d];
}
echo json_encode($out, JSON_UNESCAPED_UNICODE), "\n";
