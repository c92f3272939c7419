#!/bin/bash
#RSA_data_in=/gpfs/alice/in
